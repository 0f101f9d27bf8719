"""A run's branch takes in a base branch that moved on: merged in (or, on a branch never
pushed, rebased onto it), the result committed on the branch — with conflict markers in
the files both sides changed, for the Coder to resolve — and the run's worktree brought
to it.

The merge is computed by ``git merge-tree`` in a scratch git directory of our own that
writes its objects into the repository's: the repository's own config and attributes
(a ``merge.<name>.driver`` is a command) are never read, so no merge driver, filter or
hook of the repository runs. Only ``update-ref`` (no hooks: core.hooksPath=/dev/null)
and the worktree's reset touch the repository itself.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from core.exceptions import Conflict

from ..clone import fetch_from
from ..folders import repository_folder_check
from ..git import (
    GitAccess,
    GitError,
    git_blob,
    git_output,
    git_succeeds,
    repository_git_dir,
    repository_read_access,
    repository_write_access,
    run_git,
    worktree_access,
)
from ..models import BaseUpdate, Repository

REBASE_REFUSED_PUSHED = (
    "This repository takes a moved base in by rebase, but {branch} was pushed: a rebase rewrites it and would "
    "need a forced push, which AutoCoder never does unasked. Set base updates to merge on the Repository page."
)
BRANCH_MOVED = "{branch} moved while the base was being merged in; try again."
NO_PUSH_TARGET = "The repository has no remote to fetch {base} from."

# Bounds on what the Coder is shown of a conflict: each goes into its prompt whole.
MAX_CONFLICT_FILES = 20
MAX_HUNKS_PER_FILE = 8
MAX_SIDE_LINES = 60
MAX_BASE_SUBJECTS = 30
# Where a remote's base branch is fetched to: a ref of ours, not a branch anyone checks out.
REMOTE_BASE_REF = "refs/autocoder/base/{base}"
MARKER_START, MARKER_BASE, MARKER_MIDDLE, MARKER_END = "<<<<<<<", "|||||||", "=======", ">>>>>>>"


class BaseUpdateRefused(Conflict):
    code = "base_update_refused"


@dataclass
class ConflictHunk:
    """One conflict region: the branch's lines (ours), the lines both started from
    (base), and the moved base's lines (theirs), each bounded."""

    ours: str
    base: str
    theirs: str


@dataclass
class ConflictedFile:
    path: str
    hunks: list[ConflictHunk] = field(default_factory=list)
    # More hunks (or lines) than were kept.
    truncated: bool = False


@dataclass
class BaseUpdateResult:
    how: str  # BaseUpdate, or "up_to_date" when the branch already holds the base
    base_commit: str  # the base's head now in the branch
    old_head: str
    head: str  # the branch's new head (== old_head when up to date)
    conflicts: list[ConflictedFile] = field(default_factory=list)
    # The subjects of the base's commits the branch did not have: what they meant to do.
    base_subjects: list[str] = field(default_factory=list)

    @property
    def conflicted_paths(self) -> list[str]:
        return [conflict.path for conflict in self.conflicts]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def base_head(*, repository: Repository, fetch_for: Any = None) -> str:
    """Where the base branch is now: the repository's own ``base_branch``, or — given
    ``fetch_for`` (the user pushing the run's branches) — the push target's, fetched
    into a ref of ours first (the forge's base moved, not necessarily the local one)."""
    repo = Path(repository.path)
    base = repository.base_branch
    ref = f"refs/heads/{base}"
    if fetch_for is not None:
        from .forge import push_target_checked

        target = push_target_checked(repository=repository, user=fetch_for)
        ref = REMOTE_BASE_REF.format(base=base)
        fetch_from(repo, target, base, ref)
    return git_output(["rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=repo, access=repository_read_access(repo))


def branch_has_base(*, repository: Repository, branch: str, base_commit: str) -> bool:
    repo = Path(repository.path)
    return git_succeeds(
        ["merge-base", "--is-ancestor", base_commit, f"refs/heads/{branch}"],
        cwd=repo,
        access=repository_read_access(repo),
    )


def branch_take_base(
    *,
    repository: Repository,
    branch: str,
    worktree: Path,
    base_commit: str,
    pushed: bool,
    message: str,
) -> BaseUpdateResult:
    """Bring ``base_commit`` into ``branch`` as the repository's ``base_update`` says
    (a rebase only when the branch was never ``pushed``: BaseUpdateRefused otherwise),
    commit the result — conflict markers (with the base's version, diff3) in the files
    both changed — and reset ``worktree`` (checked out on ``branch``) to it."""
    repository_folder_check(repository=repository)
    repo = Path(repository.path)
    reading = repository_read_access(repo)
    old = git_output(["rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}"], cwd=repo, access=reading)
    if git_succeeds(["merge-base", "--is-ancestor", base_commit, old], cwd=repo, access=reading):
        return BaseUpdateResult(how="up_to_date", base_commit=base_commit, old_head=old, head=old)
    how = repository.base_update
    if how == BaseUpdate.REBASE and pushed:
        raise BaseUpdateRefused(REBASE_REFUSED_PUSHED.format(branch=branch))
    start = git_output(["merge-base", base_commit, old], cwd=repo, access=reading)
    subjects = git_output(
        ["log", "--no-merges", f"--max-count={MAX_BASE_SUBJECTS}", "--format=%s", f"{start}..{base_commit}"],
        cwd=repo,
        access=reading,
    ).splitlines()
    tree, conflicted = merged_tree(repo, old, base_commit)
    # A rebase here replays the branch's whole change as one commit on the base (git
    # 2.39's merge-tree has no --merge-base to replay commit by commit).
    parents = ["-p", base_commit] if how == BaseUpdate.REBASE else ["-p", old, "-p", base_commit]
    writing = repository_write_access(repo)
    new = run_git(["commit-tree", tree, *parents, "-F", "-"], cwd=repo, access=writing, input=message).stdout.strip()
    ref = f"refs/heads/{branch}"
    if not git_succeeds(["update-ref", "-m", "autocoder: base update", ref, new, old], cwd=repo, access=writing):
        raise GitError(BRANCH_MOVED.format(branch=branch))
    access = worktree_access(repo, worktree)
    run_git(["reset", "--hard", "--quiet", new], cwd=worktree, access=access)
    conflicts = [_conflicted_file(repo, tree, path) for path in conflicted[:MAX_CONFLICT_FILES]]
    return BaseUpdateResult(
        how=how, base_commit=base_commit, old_head=old, head=new, conflicts=conflicts, base_subjects=subjects
    )


def merged_tree(repo: Path, ours: str, theirs: str) -> tuple[str, list[str]]:
    """The tree of ``ours`` merged with ``theirs`` and the paths that conflicted, by
    ``git merge-tree`` in a scratch git directory: our config (diff3 markers), no
    attributes, the repository's objects read and written through
    ``GIT_OBJECT_DIRECTORY``."""
    objects = repository_git_dir(repo) / "objects"
    scratch_root = Path(settings.WORKTREES_ROOT) / ".merges"
    scratch_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="merge-", dir=scratch_root))
    try:
        access = GitAccess(writable=(scratch, objects))
        run_git(["init", "--quiet", "--bare", "--template=", str(scratch)], cwd=scratch, access=access)
        merge = ["merge-tree", "--write-tree", "--name-only", "--no-messages", ours, theirs]
        merged = run_git(
            ["-c", "merge.conflictStyle=diff3", *merge],
            cwd=scratch,
            access=access,
            check=False,
            extra_env={"GIT_DIR": str(scratch), "GIT_OBJECT_DIRECTORY": str(objects)},
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = merged.stdout.strip().splitlines()
    if merged.returncode not in (0, 1) or not lines:
        raise GitError(f"git merge-tree failed: {merged.stderr.strip()[:300]}")
    return lines[0], sorted(set(lines[1:])) if merged.returncode == 1 else []


def _conflicted_file(repo: Path, tree: str, path: str) -> ConflictedFile:
    """The conflict regions of ``path`` in the merged ``tree``, each side bounded."""
    try:
        text = git_blob(f"{tree}:{path}", cwd=repo, access=repository_read_access(repo))
    except GitError:
        return ConflictedFile(path=path)  # deleted on one side: no markers to show
    if b"\x00" in text[:8000]:
        return ConflictedFile(path=path)
    conflicted = ConflictedFile(path=path)
    part: str | None = None
    sides: dict[str, list[str]] = {}
    for line in text.decode("utf-8", errors="replace").splitlines():
        if line.startswith(MARKER_START):
            part, sides = "ours", {"ours": [], "base": [], "theirs": []}
        elif part is not None and line.startswith(MARKER_BASE):
            part = "base"
        elif part is not None and line.startswith(MARKER_MIDDLE) and line.strip() == MARKER_MIDDLE:
            part = "theirs"
        elif part is not None and line.startswith(MARKER_END):
            part = None
            if len(conflicted.hunks) >= MAX_HUNKS_PER_FILE:
                conflicted.truncated = True
                continue
            kept = {name: lines[:MAX_SIDE_LINES] for name, lines in sides.items()}
            conflicted.truncated |= any(len(lines) > MAX_SIDE_LINES for lines in sides.values())
            conflicted.hunks.append(ConflictHunk(**{name: "\n".join(lines) for name, lines in kept.items()}))
        elif part is not None:
            sides[part].append(line)
    return conflicted


def conflict_markers_left(*, repository: Repository, commit: str, paths: list[str]) -> list[str]:
    """Which of ``paths`` still hold a conflict marker line at ``commit``."""
    if not paths:
        return []
    repo = Path(repository.path)
    found = run_git(
        ["grep", "-I", "-l", "-E", "^(<{7}|>{7})( |$)", commit, "--", *(f":(literal){path}" for path in paths)],
        cwd=repo,
        access=repository_read_access(repo),
        check=False,
    )
    if found.returncode not in (0, 1):
        raise GitError(f"git grep failed: {found.stderr.strip()[:300]}")
    prefix = f"{commit}:"
    return sorted(line[len(prefix) :] if line.startswith(prefix) else line for line in found.stdout.splitlines())


def resolution_diff(*, repository: Repository, merged: str, resolved: str, paths: list[str]) -> str:
    """What was changed in the conflicted ``paths`` from the commit with the markers to
    the resolved one."""
    if not paths or merged == resolved:
        return ""
    repo = Path(repository.path)
    return run_git(
        ["diff", "--no-color", "--no-ext-diff", "--no-textconv", merged, resolved, "--"]
        + [f":(literal){path}" for path in paths],
        cwd=repo,
        access=repository_read_access(repo),
    ).stdout
