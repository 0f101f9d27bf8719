"""What the fake forge keeps: repositories, their pull requests, the requests it was sent.
Feature modules (checks, reviews, issues …) keep their own state on these."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


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


@dataclass
class FakeRepository:
    name: str  # owner/name (GitLab: the project's path)
    git_dir: Path | None = None
    pulls: dict[int, FakePull] = field(default_factory=dict)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
