"""What the pull request tests share: the calc repository, the fake forge (a real HTTP
server) with the tests' token, and a bare remote the run's branch is pushed to."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from repos.models import RepositoryFolder
from tests.fake_forge import FakeForge

TOKEN = "forge-token-s3cr3t"


@pytest.fixture
def repo_files() -> dict[str, str | bytes]:
    from pipelines.tests.repositories import CALC_FILES

    return dict(CALC_FILES)


@pytest.fixture
def forge(settings) -> Iterator[FakeForge]:  # type: ignore[no-untyped-def]
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    server = FakeForge().start()
    server.add_token(TOKEN)
    yield server
    server.stop()


@pytest.fixture
def remote(repo_root: Path, project) -> Path:  # type: ignore[no-untyped-def]
    bare = (repo_root.parent / "calc-remote.git").resolve()
    subprocess.run(["git", "clone", "-q", "--bare", str(repo_root), str(bare)], check=True)
    RepositoryFolder.objects.create(path=str(bare), owner=project.owner)
    return bare
