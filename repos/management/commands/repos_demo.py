"""Create a small sample repository under REPOS_ROOT for `make demo`: link it on a
project's Repository page (folder ``demo-app``) and watch the agents work on it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

FILES = {
    "README.md": "# Demo app\n\nA tiny package for AutoCoder's demo.\n",
    "src/__init__.py": "",
    "src/greeting.py": 'def greet(name: str) -> str:\n    return f"Hello, {name}!"\n',
    "tests/__init__.py": "",
    "tests/test_greeting.py": (
        'from src.greeting import greet\n\n\ndef test_greet() -> None:\n    assert greet("Ada") == "Hello, Ada!"\n'
    ),
    # The test command: runs every test_* function of tests/, no pytest needed.
    "run_tests.py": (
        "import importlib\nimport pathlib\nimport sys\nimport traceback\n\n"
        "sys.path.insert(0, str(pathlib.Path(__file__).parent))\nfailed = 0\n"
        'for path in sorted(pathlib.Path("tests").glob("test_*.py")):\n'
        '    module = importlib.import_module(f"tests.{path.stem}")\n'
        "    for name in sorted(dir(module)):\n"
        '        if name.startswith("test_"):\n'
        "            try:\n                getattr(module, name)()\n"
        '                print(f"PASSED {path}::{name}")\n'
        "            except Exception:\n                failed += 1\n"
        '                print(f"FAILED {path}::{name}")\n                traceback.print_exc()\n'
        'print(f"{failed} failed")\nsys.exit(1 if failed else 0)\n'
    ),
}


class Command(BaseCommand):
    help = "Create the sample repository demo-app under REPOS_ROOT (once)."

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(settings.REPOS_ROOT) / "demo-app"
        if path.exists():
            self.stdout.write(f"Sample repository already there: {path}")
            return
        for name, content in FILES.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(content)
        for command in (
            ["git", "init", "--quiet", "--initial-branch=main"],
            ["git", "add", "-A"],
            ["git", "-c", "user.name=AutoCoder demo", "-c", "user.email=demo@localhost", "commit", "-qm", "Demo app"],
        ):
            subprocess.run(command, cwd=path, check=True)  # noqa: S603
        self.stdout.write(
            f"Sample repository created: {path}\n"
            "Link it on a project's Repository page: folder demo-app, test command: python3 run_tests.py"
        )
