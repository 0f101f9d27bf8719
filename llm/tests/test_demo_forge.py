"""The fake forge as a person on it sees it: merging a pull request whose body says
"Closes #N" closes issue N, and the forge tells the webhook of both — the pull request's
event, then the issue's — as GitHub does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from llm.demo.forge import FakeForge
from llm.demo.forge.issues import issue_answer
from llm.demo.forge.pulls import open_by_hand


class Receiver(ThreadingHTTPServer):
    def __init__(self) -> None:
        self.deliveries: list[tuple[str, dict[str, Any]]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.deliveries.append((self.headers["X-GitHub-Event"], json.loads(body)))
                self.send_response(200)
                self.end_headers()

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def forge() -> Iterator[FakeForge]:
    server = FakeForge().start()
    yield server
    server.stop()


def test_a_merge_that_closes_an_issue_tells_the_webhook_of_both(forge: FakeForge, receiver: Receiver) -> None:
    forge.add_repository("team/app")
    status, opened = forge.handle(
        "POST", "/_control/issue", {}, {"kind": "github", "repository": "team/app", "title": "Broken", "labels": []}
    )
    assert status == 200
    pull = open_by_hand(forge, "team/app", "fix", "main", "Fix it")
    pull.body = f"Fixes the bug.\n\nCloses #{opened['number']}"
    url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"

    status, answer = forge.handle(
        "POST",
        "/_control/state",
        {},
        {"kind": "github", "repository": "team/app", "number": pull.number, "state": "merged", "webhook": url},
    )

    assert status == 200 and answer["webhook_statuses"] == [200, 200]
    [(first, merged), (second, closed)] = receiver.deliveries
    assert (first, merged["pull_request"]["merged"]) == ("pull_request", True)
    issue = forge.repositories["team/app"].issues[opened["number"]]
    assert (second, closed["action"], closed["issue"]["state"]) == ("issues", "closed", "closed")
    assert closed["issue"] == issue_answer(forge, "github", "team/app", issue) | closed["issue"]
