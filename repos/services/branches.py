"""A run's branch against the base branch: its changed files and diff, the merge on
approval, a patch, deletion; and where the base branch is now."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..folders import repository_folder_check
from ..git import (
    GitAccess,
    GitError,
    folder_read_access,
    git_blob,
    git_output,
    git_succeeds,
    repository_git_dir,
    repository_read_access,
    repository_write_access,
    run_git,
)
from ..models import MergeStrategy, Repository
from .base_update import merged_tree

MERGE_DIRTY = "the repository's checkout of {base} has uncommitted changes; commit or stash them first."
MERGE_CONFLICTS = "merging changes the same lines as {base} since the branch started."
MERGE_NOT_FAST_FORWARD = "{base} moved on since the branch started, and the project merges by fast-forward only."
MERGE_RACED = "{base} moved while merging; try again."
BRANCH_NOT_MERGED = "The branch {branch} is not merged; discard it explicitly to delete it."


MAX_DIFF_FILE_BYTES = 1_000_000
GITLINK_MODE = "160000"


def base_branch_head(*, repository: Repository) -> str:
    """The commit the base branch is at now."""
    repo = Path(repository.path)
    return git_output(
        ["rev-parse", "--verify", f"refs/heads/{repository.base_branch}^{{commit}}"],
        cwd=repo,
        access=repository_read_access(repo),
    )


def _merge_base(repo: Path, base: str, head: str) -> str:
    return git_output(["merge-base", base, head], cwd=repo, access=repository_read_access(repo))


def _blob(repo: Path, rev: str, path: str) -> tuple[str, bool]:
    """A file's text at ``rev`` and whether it is binary (or too large to show)."""
    data = git_blob(f"{rev}:{path}", cwd=repo, access=repository_read_access(repo))
    if len(data) > MAX_DIFF_FILE_BYTES or b"\x00" in data[:8000]:
        return "", True
    return data.decode("utf-8", errors="replace"), False


def _submodule_entry(path: str, action: str, old: str, new: str) -> dict[str, Any]:
    """A submodule (gitlink) the branch added, moved or removed: its commits, not files."""
    lines = {"old": f"Subproject commit {old}\n" if action != "create" else "", "new": ""}
    lines["new"] = f"Subproject commit {new}\n" if action != "delete" else ""
    return {
        "file_path": path,
        "action": action,
        "content": lines["new"],
        "old_content": lines["old"],
        "new_content": lines["new"],
        "submodule": True,
    }


def branch_changed_files(*, repository: Repository, base: str, head: str) -> list[dict[str, Any]]:
    """What ``head`` changed since it left ``base``, file by file: both versions, and the
    seed's shape ``{file_path, content, action}`` (``content``: the file after the change,
    empty for a deletion) for whoever reads a run's changes that way."""
    repo = Path(repository.path)
    start = _merge_base(repo, base, head)
    # --raw: modes and object ids, so that a submodule (mode 160000, a commit) is not
    # read as a file.
    listing = git_output(
        ["diff", "--raw", "--no-abbrev", "--no-renames", "-z", start, head],
        cwd=repo,
        access=repository_read_access(repo),
    )
    parts = [part for part in listing.split("\x00") if part]
    files: list[dict[str, Any]] = []
    for header, path in zip(parts[0::2], parts[1::2], strict=False):
        old_mode, new_mode, old_id, new_id, status = header.lstrip(":").split(" ")[:5]
        action = {"A": "create", "D": "delete"}.get(status[:1], "modify")
        if GITLINK_MODE in (old_mode, new_mode):
            files.append(_submodule_entry(path, action, old_id, new_id))
            continue
        old, old_binary = ("", False) if action == "create" else _blob(repo, start, path)
        new, new_binary = ("", False) if action == "delete" else _blob(repo, head, path)
        entry: dict[str, Any] = {
            "file_path": path,
            "action": action,
            "content": new,
            "old_content": old,
            "new_content": new,
        }
        if old_binary or new_binary:
            entry.update(content="", old_content="", new_content="", binary=True)
        files.append(entry)
    return sorted(files, key=lambda entry: entry["file_path"])


def branch_diff(*, repository: Repository, base: str, head: str) -> str:
    repo = Path(repository.path)
    start = _merge_base(repo, base, head)
    return run_git(
        ["diff", "--no-color", "--no-ext-diff", "--no-textconv", start, head],
        cwd=repo,
        access=repository_read_access(repo),
    ).stdout


# A hunk header of ``git diff -U0``: the older file's first line and count (1 when left
# out; 0 for lines inserted after that line), then the newer file's.
HUNK_HEADER = re.compile(r"^@@ -(?P<start>\d+)(?:,(?P<count>\d+))? \+\d+(?:,\d+)? @@", re.MULTILINE)


@dataclass(frozen=True)
class FileLineChanges:
    """How one file changed between two commits, on the older commit's lines."""

    # ``(first line, count)`` of each hunk; a count of 0: lines inserted after that line.
    hunks: tuple[tuple[int, int], ...] = ()
    # Git could not say which lines (a binary file, or one that became binary): the
    # file changed as a whole.
    whole_file: bool = False
    # Each hunk's lines as git wrote them (``-`` removed, ``+`` added), in ``hunks``' order.
    texts: tuple[str, ...] = ()

    def over(self, first: int, last: int) -> tuple[object, ...]:
        """What changed over lines ``first``–``last`` of the older file: the hunks that
        edit or remove any of them or insert lines among or right beside them, each with
        its lines — equal for two changes that treat those lines alike."""
        if self.whole_file:
            return ("whole file",)
        over: list[object] = []
        for index, (start, count) in enumerate(self.hunks):
            if (count and start <= last and start + count - 1 >= first) or (not count and first - 1 <= start <= last):
                over.append((start, count, self.texts[index] if index < len(self.texts) else ""))
        return tuple(over)

    def touches(self, first: int, last: int) -> bool:
        """Whether lines ``first``–``last`` of the older file were edited or removed (a
        removed or renamed file removes them all), or lines were inserted between two of
        them. Lines inserted just before or after the range leave it as it was."""
        if self.whole_file:
            return True
        for start, count in self.hunks:
            if count and start <= last and start + count - 1 >= first:
                return True
            if not count and first <= start < last:
                return True
        return False


def file_line_changes(*, repository: Repository, old: str, new: str, path: str) -> FileLineChanges:
    """Which lines of ``path`` at commit ``old`` commit ``new`` changed. Renames are not
    followed: a file moved away is removed from ``path``, every line of it changed."""
    repo = Path(repository.path)
    output = run_git(
        [
            "diff",
            "-U0",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            old,
            new,
            "--",
            f":(literal){path}",
        ],
        cwd=repo,
        access=repository_read_access(repo),
    ).stdout
    matches = list(HUNK_HEADER.finditer(output))
    hunks = tuple((int(match["start"]), int(match["count"] or 1)) for match in matches)
    # A hunk's lines run from the end of its header line to the next header.
    ends = [match.start() for match in matches[1:]] + [len(output)] if matches else []
    texts = tuple(output[output.find("\n", match.end()) + 1 : end] for match, end in zip(matches, ends, strict=True))
    binary = any(line.startswith("Binary files ") for line in output.splitlines())
    return FileLineChanges(hunks=hunks, whole_file=binary and not hunks, texts=texts)


@dataclass
class MergeResult:
    merged: bool
    commit: str = ""
    conflicts: list[str] = field(default_factory=list)
    message: str = ""
    # The branch was already in the base: nothing merged, ``commit`` the base's head.
    already_in_base: bool = False


def _checked_out_in_main_tree(repo: Path, base: str) -> bool:
    head = run_git(
        ["symbolic-ref", "--quiet", "HEAD"], cwd=repo, access=repository_read_access(repo), check=False
    ).stdout.strip()
    return head == f"refs/heads/{base}"


def branch_merge(*, repository: Repository, branch: str) -> MergeResult:
    """Merge ``branch`` into the base branch without touching any working tree until
    the result is known: the merge is computed by ``git merge-tree``, committed with
    ``commit-tree`` and published with a compare-and-set ``update-ref``. When the base
    is checked out in the repository's own folder, that checkout follows (and a dirty
    one refuses the merge). Conflicts leave everything as it was."""
    repository_folder_check(repository=repository)
    repo = Path(repository.path)
    base = repository.base_branch
    reading, writing = repository_read_access(repo), repository_write_access(repo)
    old = git_output(["rev-parse", "--verify", f"refs/heads/{base}^{{commit}}"], cwd=repo, access=reading)
    tip = git_output(["rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}"], cwd=repo, access=reading)
    if git_succeeds(["merge-base", "--is-ancestor", tip, old], cwd=repo, access=reading):
        return MergeResult(True, old, [], f"{branch} is already in {base}.", already_in_base=True)
    checked_out = _checked_out_in_main_tree(repo, base)
    if checked_out and git_output(
        ["status", "--porcelain", "--untracked-files=no"], cwd=repo, access=folder_read_access(repo)
    ):
        return MergeResult(False, "", [], MERGE_DIRTY.format(base=base))
    fast_forward = git_succeeds(["merge-base", "--is-ancestor", old, tip], cwd=repo, access=reading)
    if repository.merge_strategy == MergeStrategy.FF_ONLY:
        if not fast_forward:
            return MergeResult(False, "", [], MERGE_NOT_FAST_FORWARD.format(base=base))
        new = tip
    else:
        # Merged apart from the repository's config and attributes: its merge drivers never run.
        tree, conflicts = merged_tree(repo, old, tip)
        if conflicts:
            return MergeResult(False, "", conflicts, MERGE_CONFLICTS.format(base=base))
        message = f"Merge branch '{branch}' into {base}\n\nMerged by AutoCoder on approval.\n"
        commit = run_git(
            ["commit-tree", tree, "-p", old, "-p", tip, "-F", "-"], cwd=repo, access=writing, input=message
        )
        new = commit.stdout.strip()
    ref = f"refs/heads/{base}"
    if not git_succeeds(["update-ref", "-m", f"autocoder: merge {branch}", ref, new, old], cwd=repo, access=writing):
        return MergeResult(False, "", [], MERGE_RACED.format(base=base))
    if checked_out:
        # The checkout's HEAD now names the merged commit: bring its files along.
        checkout = GitAccess(writable=(repository_git_dir(repo), repo), folders_only=(repo,))
        moved = run_git(["read-tree", "-m", "-u", old, new], cwd=repo, access=checkout, check=False)
        if moved.returncode != 0:
            run_git(["update-ref", ref, old, new], cwd=repo, access=writing, check=False)
            detail = moved.stderr.strip().splitlines()
            return MergeResult(False, "", [], f"the checkout of {base} could not be updated: {' '.join(detail[-2:])}")
    return MergeResult(True, new, [], f"Merged {branch} into {base}.")


def branch_format_patch(*, repository: Repository, base: str, branch: str) -> str:
    repo = Path(repository.path)
    start = _merge_base(repo, base, branch)
    return run_git(
        ["format-patch", "--stdout", "--no-signature", "--no-ext-diff", "--no-textconv", f"{start}..{branch}"],
        cwd=repo,
        access=repository_read_access(repo),
    ).stdout


def branch_delete(*, repository: Repository, branch: str, force: bool = False) -> None:
    repo = Path(repository.path)
    reading = repository_read_access(repo)
    if not git_succeeds(["rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=repo, access=reading):
        return
    base = repository.base_branch
    if not force and not git_succeeds(["merge-base", "--is-ancestor", branch, base], cwd=repo, access=reading):
        raise GitError(BRANCH_NOT_MERGED.format(branch=branch))
    run_git(["branch", "--quiet", "-D", branch], cwd=repo, access=repository_write_access(repo))
