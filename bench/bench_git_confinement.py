"""What confining git costs: the same git commands run directly (as the server ran them
before) and through repos.git.run_git (bubblewrap, as the storage account, seeing only
the folders each command needs), in one process, on one repository of N files and a
worktree of it. The process holds ~400 MB, as a worker does: a fork copies its page
tables, which is why the sandbox starts its account with setpriv, not Popen's user=.

Run: .venv/bin/python bench/bench_git_confinement.py [--files 5000] [--n 40]
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from _common import p50, parser, pct, setup_django, table, time_calls


def git(cwd: Path, *args: str) -> str:
    environment = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    command = ["git", "-c", "safe.directory=*", "-c", "user.name=b", "-c", "user.email=b@example.com", *args]
    return subprocess.run(command, cwd=cwd, env=environment, check=True, capture_output=True, text=True).stdout


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--files", type=int, default=5000)
    p.add_argument("--n", type=int, default=40)
    args = p.parse_args()
    setup_django("git_confinement", "sqlite")
    ballast = bytearray(400 * 1024 * 1024)
    for index in range(0, len(ballast), 4096):
        ballast[index] = 1

    from django.conf import settings

    from core.sandbox_probe import sandbox_status
    from repos.git import GitAccess, run_git, worktree_access

    base = Path(tempfile.mkdtemp(prefix="bench-git-"))
    base.chmod(0o755)
    settings.REPOS_ROOT = str(base / "repos")
    settings.WORKTREES_ROOT = str(base / "worktrees")
    repo = base / "repos" / "app"
    for index in range(args.files):
        path = repo / f"pkg{index % 50}" / f"module_{index}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {index}\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "files")
    worktree = base / "worktrees" / "task-1-run-1"
    worktree.mkdir(parents=True)
    git(repo, "worktree", "add", "-q", "--force", str(worktree), "-b", "autocoder/bench")
    assert sandbox_status(refresh=True).available, sandbox_status().message

    reading = GitAccess(read_only=(repo / ".git",))
    in_worktree = worktree_access(repo, worktree)
    rows = []
    for label, direct, confined in (
        (
            "rev-parse HEAD (repository, read-only)",
            lambda: git(repo, "rev-parse", "HEAD"),
            lambda: run_git(["rev-parse", "HEAD"], cwd=repo, access=reading),
        ),
        (
            f"status of a worktree of {args.files} files",
            lambda: git(worktree, "status", "--porcelain"),
            lambda: run_git(["status", "--porcelain"], cwd=worktree, access=in_worktree),
        ),
        (
            "add --all + diff --cached (worktree, read-write)",
            lambda: (git(worktree, "add", "--all"), git(worktree, "diff", "--cached", "--quiet")),
            lambda: (
                run_git(["add", "--all"], cwd=worktree, access=in_worktree),
                run_git(["diff", "--cached", "--quiet"], cwd=worktree, access=in_worktree),
            ),
        ),
    ):
        confined()  # the first hands the folders to the storage account
        before = time_calls(direct, args.n)
        after = time_calls(confined, args.n)
        rows.append(
            (
                label,
                p50(before) * 1000,
                p50(after) * 1000,
                pct(after, 99) * 1000,
                f"{p50(after) / p50(before):.2f}x",
            )
        )
    table(
        f"git confined vs direct ({args.files} files, {args.n} calls each, a 400 MB process)",
        ["command", "direct p50 ms", "confined p50 ms", "confined p99 ms", "ratio"],
        rows,
        notes=["direct: the server's own git, as before; confined: repos.git.run_git (bubblewrap, storage account)"],
    )
    del ballast


if __name__ == "__main__":
    main()
