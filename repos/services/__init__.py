"""Linked repositories' services, by subject:

- ``linking``: link a working tree, clone one, the project's own repository, unlink;
  what git may clone from or push to;
- ``settings``: base branch, merge strategy, test command, base image;
- ``forge``: the push remote and forge of pull requests, and the push;
- ``worktrees``: a run's worktree made and removed;
- ``commits``: what a run commits from its worktree;
- ``branches``: a run's branch against the base: files, diff, merge, patch, deletion;
  which lines of a file two commits apart changed;
- ``reading``: files at a commit, whether a commit contains another, a branch's paths.

Import from the module. The names below are also exported here because pipelines/ calls
them by this path.
"""

from .branches import (
    FileLineChanges,
    branch_changed_files,
    branch_delete,
    branch_diff,
    branch_format_patch,
    branch_merge,
    file_line_changes,
)
from .commits import worktree_commit, worktree_pending
from .forge import branch_push, repository_forge_client, repository_set_forge
from .linking import OWN_REPOSITORY_START, own_repository_path, repository_ensure, repository_link, repository_unlink
from .linking import _create_empty_repository as _create_empty_repository  # pipelines' tests
from .worktrees import worktree_create, worktree_remove

__all__ = [
    "OWN_REPOSITORY_START",
    "FileLineChanges",
    "branch_changed_files",
    "branch_delete",
    "branch_diff",
    "branch_format_patch",
    "branch_merge",
    "branch_push",
    "file_line_changes",
    "own_repository_path",
    "repository_ensure",
    "repository_forge_client",
    "repository_link",
    "repository_set_forge",
    "repository_unlink",
    "worktree_commit",
    "worktree_create",
    "worktree_pending",
    "worktree_remove",
]
