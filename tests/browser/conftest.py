"""A real AutoCoder in the embedded topology (one daphne process with its in-process
worker) on its own SQLite database, the fake Anthropic API, and Debian's Chromium driven
by Playwright. Screenshots go to artifacts/browser/."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.fake_anthropic import FakeAnthropicServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BASE_DIR = Path(__file__).resolve().parents[2]
ARTIFACTS = BASE_DIR / "artifacts" / "browser"
# How long the app's database may take to migrate, and the app to answer.
STARTUP_SECONDS = 300
# How long a test waits for what a run of the fake agents does (seconds on a quiet
# machine), and for any page condition: waits end when the condition holds, so a long
# deadline costs nothing where things are fast and keeps a loaded machine from failing.
RUN_TIMEOUT_MS = 120_000
ACTION_TIMEOUT_MS = 60_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@dataclass
class LiveApp:
    url: str
    llm: FakeAnthropicServer
    log: Path
    repos_root: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _app_env(folder: Path, llm_url: str) -> dict[str, str]:
    """The environment of an app whose database, repositories and worktrees are in
    ``folder``: the embedded topology, whatever this test run's own is."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.base",
        "DEBUG": "true",
        "DATABASE_URL": f"sqlite:///{folder / 'db.sqlite3'}",
        "REDIS_URL": "",
        "EMBEDDED_WORKER": "",
        "ANTHROPIC_BASE_URL": llm_url,
        "ANTHROPIC_API_KEY": "sk-ant-browser-test",
        "LLM_RETRY_DELAYS": "0.05,0.05,0.05",
        "REPOS_ROOT": str(folder / "repos"),
        "WORKTREES_ROOT": str(folder / "worktrees"),
        "LOG_LEVEL": "WARNING",
        # The fake forge of the team-workflow test listens on 127.0.0.1.
        "CLONE_ALLOWED_NETWORKS": "127.0.0.0/8",
    }


@pytest.fixture(scope="session")
def _migrated_database() -> Iterator[Path]:
    """An empty, migrated SQLite database, made once per pytest process: each module's
    app starts on a copy of it instead of running every migration again."""
    folder = Path(tempfile.mkdtemp(prefix="autocoder-browser-db-"))
    try:
        # A deadline, not an expectation: a loaded machine took 2 minutes (seen at load
        # 20 on 2 cores), a quiet one takes seconds.
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=BASE_DIR,
            env=_app_env(folder, "http://127.0.0.1:9"),
            check=True,
            timeout=STARTUP_SECONDS,
        )
        yield folder / "db.sqlite3"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def live_app(_migrated_database: Path) -> Iterator[LiveApp]:
    # One app per module, so that what a module's last test left running (a round of
    # changes it asked for, say) dies with it instead of calling the next module's model.
    # Not under pytest's own temporary folder: every pytest session that starts on the
    # machine makes that private again (0700), and the sandbox's account must keep
    # reaching this app's worktrees for the whole module.
    folder = Path(tempfile.mkdtemp(prefix="autocoder-browser-app-"))
    folder.chmod(0o711)
    shutil.copyfile(_migrated_database, folder / "db.sqlite3")
    llm = FakeAnthropicServer().start()
    port = _free_port()
    env = _app_env(folder, llm.url)
    log = folder / "daphne.log"
    process: subprocess.Popen[bytes] | None = None
    try:
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
                cwd=BASE_DIR,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        app = LiveApp(f"http://127.0.0.1:{port}", llm, log, folder / "repos", process)
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _answers(app.url + "/healthz"):
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"the app did not start:\n{app.output()}")
            time.sleep(0.1)
        yield app
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        llm.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def _artifacts() -> Path:
    """The screenshots' folder, emptied once per pytest process."""
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


# One Chromium per module, not per process: Playwright's sync API keeps an event loop
# running in the main thread while it is open, and the tests that the same pytest process
# runs after the browser modules (asyncio.run, async_to_sync) fail on it.
@pytest.fixture(scope="module")
def browser(_artifacts: Path) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser, live_app: LiveApp) -> Iterator[object]:
    """A fresh browser context; uncaught JavaScript errors fail the test."""
    live_app.llm.reset()
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    context.set_default_timeout(ACTION_TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors: {errors}"
