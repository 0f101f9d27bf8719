"""The README's admin commands work as written: `make superuser` and `make
demo-superuser` create the admin in the database each server uses (the demo's is
demo.sqlite3), with no SECRET_KEY to set and no stray db.sqlite3 left behind."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

# make runs with the database each test names (SQLite files of its own) and no Redis.
pytestmark = [pytest.mark.slow, pytest.mark.own_topology]

ROOT = Path(__file__).resolve().parent.parent


def make(target: str, tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE")
    }
    env["DJANGO_SUPERUSER_PASSWORD"] = "correct horse battery staple"
    arguments = [f"{name}={value}" for name, value in variables.items()]
    return subprocess.run(
        ["make", "--no-print-directory", target, *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def admins(database: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(database) as connection:
        return connection.execute("select email, is_superuser from accounts_user").fetchall()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_superuser_writes_to_the_demos_database(tmp_path: Path) -> None:
    demo_db = tmp_path / "demo.sqlite3"
    stray = ROOT / "db.sqlite3"
    existed = stray.exists()

    done = make("demo-superuser", tmp_path, DEMO_DB=str(demo_db), ARGS="--noinput --email admin@example.com")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "SECRET_KEY" not in done.stderr
    assert admins(demo_db) == [("admin@example.com", 1)]
    assert stray.exists() == existed, "a db.sqlite3 was left beside the demo's database"


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_superuser_writes_to_the_database_make_run_serves(tmp_path: Path) -> None:
    database = tmp_path / "run.sqlite3"
    done = subprocess.run(
        ["make", "--no-print-directory", "superuser", "ARGS=--noinput --email root@example.com"],
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "SECRET_KEY", "DEBUG")},
            "DATABASE_URL": f"sqlite:///{database}",
            "DJANGO_SUPERUSER_PASSWORD": "correct horse battery staple",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert admins(database) == [("root@example.com", 1)]
