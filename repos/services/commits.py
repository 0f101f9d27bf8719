"""What a run commits from its worktree: the commit rule (:func:`worktree_pending`) and the
commit itself, staged by literal pathspecs."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..git import git_output, git_succeeds, run_git, worktree_access
from ..models import Repository

# What a commit leaves out is listed, but only so far: a test command can make any number
# of files. Folders are one entry each (git's own listing collapses new folders).
LEFT_OUT_MAX_ENTRIES = 100
LEFT_OUT_MAX_COUNTED_FILES = 20_000


@dataclass(frozen=True)
class PendingChanges:
    """What a worktree holds beyond its last commit, split by the commit rule: the
    paths to commit (``changes``: each ``{action, file_path}``) and the new paths left
    out (``left_out``: each ``{path}``, a folder ``{path: "dir/", files: n}``, with
    ``repository: true`` for a nested repository)."""

    changes: list[dict[str, str]]
    left_out: list[dict[str, Any]]


def _literal(paths: list[str]) -> str:
    """A NUL-separated pathspec file (``--pathspec-file-nul``): each path literally,
    whatever characters it holds (no globbing, no magic of its own)."""
    return "".join(f":(literal){path}\x00" for path in paths)


def _status_action(status: str) -> str:
    return "delete" if "D" in status else "modify"


def _count_files(folder: Path) -> tuple[int, bool]:
    """The files under ``folder`` (symlinks not followed), up to a bound; and whether
    the bound cut the count short."""
    count = 0
    for _, folders, files in os.walk(folder, followlinks=False):
        # A nested repository's own git dir is not its files.
        folders[:] = [name for name in folders if name != ".git"]
        count += len(files)
        if count >= LEFT_OUT_MAX_COUNTED_FILES:
            return LEFT_OUT_MAX_COUNTED_FILES, True
    return count, False


def _left_out_folder(worktree: Path, relative: str, files: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": relative}
    folder = worktree / relative.rstrip("/")
    if files is None:
        files, capped = _count_files(folder)
        if capped:
            entry["capped"] = True
    entry["files"] = files
    if (folder / ".git").exists():
        entry["repository"] = True
    return entry


def worktree_pending(
    *, repository: Repository, worktree: Path, written: set[str], environment: Iterable[str] = ()
) -> PendingChanges:
    """The commit rule: changes to tracked files are committed (test commands rarely
    rewrite tracked files, and a Coder's edit or deletion of one shows only there); a
    NEW path only when the Coder wrote it through its tools (``written``, relative
    paths); every other new path — test reports, caches, build output, a nested
    repository a test made — is left out and listed. Ignored files are not looked at at
    all, and what the run's environment restored (``environment``: its ``.venv``,
    ``node_modules``… where the repository does not ignore them) is neither committed
    nor listed: it is the environment, not the run's doing."""
    restored = tuple(path.rstrip("/") for path in environment if path)
    access = worktree_access(Path(repository.path), worktree)
    # normal, not all: a new folder is one line however many files it holds.
    listing = run_git(
        ["status", "--porcelain", "--no-renames", "-z", "--untracked-files=normal", "--ignore-submodules=dirty"],
        cwd=worktree,
        access=access,
    ).stdout
    changes: list[dict[str, str]] = []
    left_out: list[dict[str, Any]] = []
    for entry in (entry for entry in listing.split("\x00") if len(entry) > 3):
        status, path = entry[:2], entry[3:]
        if status == "??" and any(path.rstrip("/") == kept or path.startswith(kept + "/") for kept in restored):
            continue
        if status != "??":
            changes.append({"action": _status_action(status), "file_path": path})
        elif not path.endswith("/"):
            if path in written:
                changes.append({"action": "create", "file_path": path})
            else:
                left_out.append({"path": path})
        elif any(name.startswith(path) for name in written):
            # A new folder the Coder wrote into: its files one by one (only here, where
            # it wrote), the Coder's committed, the rest left out as one entry.
            inside = run_git(
                ["ls-files", "--others", "--exclude-standard", "-z", "--", f":(literal){path}"],
                cwd=worktree,
                access=access,
            ).stdout
            others = 0
            for name in (name for name in inside.split("\x00") if name):
                if name in written and not name.endswith("/"):
                    changes.append({"action": "create", "file_path": name})
                else:
                    others += 1
            if others:
                left_out.append(_left_out_folder(worktree, path, others))
        else:
            left_out.append(_left_out_folder(worktree, path))
    if len(left_out) > LEFT_OUT_MAX_ENTRIES:
        more = len(left_out) - LEFT_OUT_MAX_ENTRIES
        left_out = [*left_out[:LEFT_OUT_MAX_ENTRIES], {"path": "", "more": more}]
    return PendingChanges(changes=sorted(changes, key=lambda change: change["file_path"]), left_out=left_out)


def worktree_commit(
    *,
    repository: Repository,
    worktree: Path,
    message: str,
    written: Iterable[str] = (),
    pending: PendingChanges | None = None,
) -> str | None:
    """Commit what the commit rule keeps (``pending``, or :func:`worktree_pending` of
    the Coder's ``written`` paths), nothing else the worktree holds; the new commit, or
    None if nothing changed."""
    if pending is None:
        pending = worktree_pending(repository=repository, worktree=worktree, written=set(written))
    changes = pending.changes
    access = worktree_access(Path(repository.path), worktree)
    removed = [change["file_path"] for change in changes if change["action"] == "delete"]
    added = [change["file_path"] for change in changes if change["action"] != "delete"]
    if removed:
        # From the index only, by name: a folder the command made where the file was is
        # not added through the removal's pathspec.
        run_git(
            ["rm", "--cached", "--quiet", "--ignore-unmatch", "-r", "--pathspec-from-file=-", "--pathspec-file-nul"],
            cwd=worktree,
            access=access,
            input=_literal(removed),
        )
    if added:
        run_git(
            ["add", "--pathspec-from-file=-", "--pathspec-file-nul"], cwd=worktree, access=access, input=_literal(added)
        )
    if git_succeeds(["diff", "--cached", "--quiet", "--no-ext-diff", "--no-textconv"], cwd=worktree, access=access):
        return None
    run_git(["commit", "--quiet", "--no-verify", "-F", "-"], cwd=worktree, access=access, input=message)
    return git_output(["rev-parse", "HEAD"], cwd=worktree, access=access)
