"""Create a small sample repository under REPOS_ROOT for `make demo`: link it on a
project's Repository page (folder ``demo-app``) and watch the agents work on it. Beside it,
a bare clone (``demo-app-remote.git``) where the demo's fake forge finds the branches a
pull request is opened for."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from ._demo_files import FILES

__all__ = ["FILES", "REMOTE_NAME", "Command"]

REMOTE_NAME = "demo-app-remote.git"
IDENTITY = ("git", "-c", "user.name=AutoCoder demo", "-c", "user.email=demo@localhost")


class Command(BaseCommand):
    help = "Create the sample repository demo-app under REPOS_ROOT, and its bare remote (once)."

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(settings.REPOS_ROOT) / "demo-app"
        if path.exists():
            self.stdout.write(f"Sample repository already there: {path}")
        else:
            for name, content in FILES.items():
                (path / name).parent.mkdir(parents=True, exist_ok=True)
                (path / name).write_text(content)
            for command in (
                ["git", "init", "--quiet", "--initial-branch=main"],
                ["git", "add", "-A"],
                [*IDENTITY, "commit", "-qm", "Demo app"],
            ):
                subprocess.run(command, cwd=path, check=True)  # noqa: S603
            self.stdout.write(
                f"Sample repository created: {path}\n"
                "Link it on a project's Repository page: folder demo-app, test command: python3 run_tests.py"
            )
        remote = path.parent / REMOTE_NAME
        if not remote.exists():
            subprocess.run(["git", "clone", "--quiet", "--bare", str(path), str(remote)], check=True)  # noqa: S603, S607
            self.stdout.write(f"Its bare remote, for pull requests on the demo forge: {remote}")
