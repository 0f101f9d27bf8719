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


@pytest.fixture(scope="module")
def live_app() -> Iterator[LiveApp]:
    # Not under pytest's own temporary folder: every pytest session that starts on the
    # machine makes that private again (0700), and the sandbox's account must keep
    # reaching this app's worktrees for the whole module.
    folder = Path(tempfile.mkdtemp(prefix="autocoder-browser-app-"))
    folder.chmod(0o711)
    llm = FakeAnthropicServer().start()
    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.base",
        "DEBUG": "true",
        "DATABASE_URL": f"sqlite:///{folder / 'db.sqlite3'}",
        "REDIS_URL": "",
        "EMBEDDED_WORKER": "",
        "ANTHROPIC_BASE_URL": llm.url,
        "ANTHROPIC_API_KEY": "sk-ant-browser-test",
        "LLM_RETRY_DELAYS": "0.05,0.05,0.05",
        "REPOS_ROOT": str(folder / "repos"),
        "WORKTREES_ROOT": str(folder / "worktrees"),
        "LOG_LEVEL": "WARNING",
        # The fake forge of the team-workflow test listens on 127.0.0.1.
        "CLONE_ALLOWED_NETWORKS": "127.0.0.0/8",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=BASE_DIR, env=env, check=True, timeout=120
    )
    log = folder / "daphne.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    app = LiveApp(f"http://127.0.0.1:{port}", llm, log, folder / "repos", process)
    try:
        deadline = time.monotonic() + 30
        while not _answers(app.url + "/healthz"):
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"the app did not start:\n{app.output()}")
            time.sleep(0.1)
        yield app
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        llm.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser, live_app: LiveApp) -> Iterator[object]:
    """A fresh browser context; uncaught JavaScript errors fail the test."""
    live_app.llm.reset()
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors: {errors}"
