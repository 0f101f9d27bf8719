"""Reading a repository's history without a worktree: files as a commit holds them,
whether one commit contains another, and the paths a branch changed. Each is one git
command in the sandbox (repos.git), whatever the number of files."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..git import git_output, git_run_bytes, git_succeeds, repository_read_access
from ..models import Repository

# A file read for its text (a memory's citation) larger than this is taken as absent:
# nothing cited from it could be checked line by line in reasonable time.
READ_FILE_MAX_BYTES = 2_000_000


def files_at_commit(*, repository: Repository, commit: str, paths: Iterable[str]) -> dict[str, str | None]:
    """Each path's text at ``commit`` (undecodable bytes replaced), or None where the
    commit has no such file (or a folder, a submodule, a file over READ_FILE_MAX_BYTES)."""
    wanted = sorted({path for path in paths if path and "\n" not in path and "\r" not in path})
    found: dict[str, str | None] = dict.fromkeys(wanted)
    if not wanted or not commit:
        return found
    repo = Path(repository.path)
    # --batch answers each "<rev>:<path>" line with "<id> <type> <size>\n<bytes>\n" or
    # "<rev>:<path> missing\n", in order.
    request = "".join(f"{commit}:{path}\n" for path in wanted).encode()
    result = git_run_bytes(["cat-file", "--batch"], cwd=repo, access=repository_read_access(repo), input=request)
    if result.returncode != 0:
        return found
    output, offset = result.stdout, 0
    for path in wanted:
        end = output.find(b"\n", offset)
        if end < 0:
            break
        header = output[offset:end].decode("utf-8", errors="replace").split(" ")
        offset = end + 1
        if len(header) != 3 or not header[2].isdigit():
            continue  # "missing" or "ambiguous": no such file
        size = int(header[2])
        data = output[offset : offset + size]
        offset += size + 1
        if header[1] == "blob" and size <= READ_FILE_MAX_BYTES:
            found[path] = data.decode("utf-8", errors="replace")
    return found


def top_level_names_at_commit(*, repository: Repository, commit: str) -> set[str]:
    """The names of the files and folders at the top of ``commit``'s tree."""
    if not commit:
        return set()
    repo = Path(repository.path)
    listing = git_output(
        ["ls-tree", "--name-only", "-z", f"{commit}^{{tree}}"], cwd=repo, access=repository_read_access(repo)
    )
    return {name for name in listing.split("\x00") if name}


def commit_contains(*, repository: Repository, commit: str, ancestor: str) -> bool:
    """Whether ``commit``'s history holds ``ancestor`` (False for an unknown commit)."""
    if not commit or not ancestor:
        return False
    repo = Path(repository.path)
    return git_succeeds(
        ["merge-base", "--is-ancestor", f"{ancestor}^{{commit}}", f"{commit}^{{commit}}"],
        cwd=repo,
        access=repository_read_access(repo),
    )


def branch_changed_paths(*, repository: Repository, base: str, head: str) -> list[str]:
    """The paths ``head`` changed since it left ``base`` (names only; renames as a
    deletion and an addition)."""
    if not base or not head or base == head:
        return []
    repo = Path(repository.path)
    listing = git_output(
        ["diff", "--name-only", "--no-renames", "-z", f"{base}...{head}"],
        cwd=repo,
        access=repository_read_access(repo),
    )
    return [path for path in listing.split("\x00") if path]
