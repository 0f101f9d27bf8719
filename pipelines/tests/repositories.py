"""What the tests of runs on a real git repository share: git itself, a committed
fixture repository, the calc repository most of them link, and a run's live log."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pipelines.models import PipelineRun, RunEvent

CALC = "def add(a, b):\n    return a - b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n"
CHECK = "from app.calc import add\n\nassert add(2, 3) == 5, f'add(2, 3) is {add(2, 3)}'\nprint('ok')\n"
# The calc repository: add subtracts, and check.py says so.
CALC_FILES: dict[str, str | bytes] = {"app/__init__.py": "", "app/calc.py": CALC, "check.py": CHECK}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def git_commit(root: Path, message: str, *options: str) -> None:
    """Commit as the fixture's developer (``options`` such as ``-a``, ``--allow-empty``)."""
    git(root, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "--quiet", *options, "-m", message)


def committed_repository(root: Path, files: dict[str, str | bytes]) -> Path:
    """A git repository at ``root`` whose ``main`` has one commit: ``files`` (path → content)."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    git(root, "init", "--quiet", "--initial-branch=main")
    git(root, "add", "-A")
    git_commit(root, "Initial")
    return root


def log_text(run: PipelineRun, agent: str) -> str:
    """What ``agent`` wrote to the run's live log."""
    events = RunEvent.objects.filter(run=run, type="agent-log").order_by("id")
    return "".join(e.data["chunk"] for e in events if e.data["agent"] == agent)
