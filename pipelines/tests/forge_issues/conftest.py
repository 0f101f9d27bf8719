"""What the forge issue tests share with the pull request tests (the calc repository, the
fake forge, the bare remote), and a person on the forge: an issue opened, edited or
closed there, and the signed delivery the forge sends about it."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.crypto import decrypt_secret
from llm.demo.forge.answers import signed_delivery
from llm.demo.forge.issues import issue_event, person_edits
from pipelines.tests.pull_requests.conftest import TOKEN, forge, remote, repo_files  # noqa: F401 (fixtures)
from repos.models import Repository
from repos.services import repository_set_forge
from tests.fake_forge import FakeForge

LABEL = "autocoder"


def set_forge(linked: Repository, forge: FakeForge, remote: Path, kind: str, owner, **issues) -> Repository:  # type: ignore[no-untyped-def]  # noqa: F811
    forge.add_repository("team/calc", git_dir=remote)
    return repository_set_forge(
        repository=linked,
        user=owner,
        push_url=str(remote),
        forge_kind=kind,
        forge_api_url=forge.api_url(kind),
        forge_repository="team/calc",
        token=TOKEN,
        **{"forge_issue_label": LABEL, **issues},
    )


class Person:
    """Someone on the forge: each change returns the issue's number and posts the delivery
    to the repository's webhook (with ``deliver``), as the forge would."""

    def __init__(self, forge: FakeForge, repository: Repository, kind: str, client) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
        self.forge, self.repository, self.kind, self.client = forge, repository, kind, client
        self.last: tuple[bytes, dict[str, str]] | None = None

    def change(self, *, deliver: bool = True, **body) -> int:  # type: ignore[no-untyped-def]
        with self.forge.lock:
            issue, action = person_edits(self.forge, "team/calc", body)
            event, payload = issue_event(self.forge, self.kind, "team/calc", issue, action)
        secret = decrypt_secret(self.repository.forge_webhook_secret_encrypted)
        self.last = signed_delivery(self.kind, event, payload, secret)
        if deliver:
            assert self.post(*self.last) in ("applied", "ignored")
        return issue.number

    def post(self, body: bytes, headers: dict[str, str]) -> str:
        extra = {"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()}
        answer = self.client.post(
            f"/api/forges/webhooks/{self.repository.pk}", body, content_type="application/json", **extra
        )
        assert answer.status_code == 200, answer.content
        self.outcome = str(answer.json()["outcome"])
        return self.outcome


@pytest.fixture
def person_for(forge, client):  # type: ignore[no-untyped-def]  # noqa: F811
    def make(repository: Repository, kind: str) -> Person:
        return Person(forge, repository, kind, client)

    return make
