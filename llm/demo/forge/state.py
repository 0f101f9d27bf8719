"""What the fake forge keeps: repositories, their pull requests, the requests it was sent.
Feature modules (checks, reviews, issues …) keep their own state on these."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

PREFIXES = {"github": "/github", "gitea": "/gitea/api/v1", "gitlab": "/gitlab/api/v4"}


def now_stamp() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class FakePull:
    number: int
    head: str
    base: str
    title: str
    body: str
    state: str = "open"  # open, merged, closed
    # As on the real forges, every change is stamped, so two events' bodies differ.
    updated_at: str = field(default_factory=now_stamp)
    # The issues its merge closed ("Closes #N" in its body), as the forges do.
    closed_issues: list[int] = field(default_factory=list)


@dataclass
class FakeRepository:
    name: str  # owner/name (GitLab: the project's path)
    git_dir: Path | None = None
    pulls: dict[int, FakePull] = field(default_factory=dict)
    issues: dict[int, Any] = field(default_factory=dict)  # issues.FakeIssue by number


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class ForgeState:
    """The forge's state and its addresses; ``server.FakeForge`` serves it."""

    def __init__(self) -> None:
        self.repositories: dict[str, FakeRepository] = {}
        self.tokens: dict[str, bool] = {}  # token -> may write
        self.logins: dict[str, str] = {}  # token -> its account's login (GET /user); default: review_state.OWN_LOGIN
        self.requests: list[Recorded] = []
        self.fail_next: list[int] = []  # statuses to answer with, in order
        self.unreachable = False  # drop connections without an answer
        # Held over every answer (controls take it themselves): handlers change state freely.
        self.lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None

    def add_repository(self, name: str, *, git_dir: Path | None = None) -> FakeRepository:
        self.repositories[name] = FakeRepository(name=name, git_dir=git_dir)
        return self.repositories[name]

    def add_token(self, token: str, *, write: bool = True) -> None:
        self.tokens[token] = write

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def api_url(self, kind: str) -> str:
        return f"http://127.0.0.1:{self.port}{PREFIXES[kind]}"

    def html_url(self, kind: str, repository: str, number: int) -> str:
        word = "merge_requests" if kind == "gitlab" else "pulls"
        return f"http://127.0.0.1:{self.port}/{kind}-web/{repository}/{word}/{number}"
