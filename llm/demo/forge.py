"""A fake forge for the tests and ``make demo``: a real local HTTP server speaking the documented pull and
merge request endpoints of GitHub (``/github``), Gitea/Forgejo (``/gitea/api/v1``) and
GitLab (``/gitlab/api/v4``), reached by API base URL as the real ones are.

It keeps repositories (optionally backed by a bare git repository, whose branches a new
pull request's head must exist in, as on a real forge), checks the token and its scope
like the forges do (401 unknown token, 403 no write access), refuses a second open pull
request for the same head (422 GitHub, 409 GitLab and Gitea), records every request, and
can fail on demand. Tests merge or close a pull request as a person on the forge would,
and build the webhook delivery the forge would send (``webhook``).

Standard library only, like the demo model. Run on its own (``make demo`` does, for the
README's pull-request walk-through), it serves until Ctrl-C:

    python -m llm.demo.forge --port 8091 --token T --repository team/app=/path/to/bare.git

and ``POST /_control/state`` with {"kind", "repository", "number", "state"} and, to be told
like a real forge tells, {"webhook": URL, "secret": S} plays the person on the forge: the
pull request is merged or closed and the signed delivery is POSTed to the webhook URL.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import re
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

PREFIXES = {"github": "/github", "gitea": "/gitea/api/v1", "gitlab": "/gitlab/api/v4"}


@dataclass
class FakePull:
    number: int
    head: str
    base: str
    title: str
    body: str
    state: str = "open"  # open, merged, closed
    # As on the real forges, every change is stamped, so two events' bodies differ.
    updated_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


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


class FakeForge:
    """Start with ``start()``; ``api_url(kind)`` is what the product is configured with."""

    def __init__(self) -> None:
        self.repositories: dict[str, FakeRepository] = {}
        self.tokens: dict[str, bool] = {}  # token -> may write
        self.requests: list[Recorded] = []
        self.fail_next: list[int] = []  # statuses to answer with, in order
        self.unreachable = False  # drop connections without an answer
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    # --- set-up

    def add_repository(self, name: str, *, git_dir: Path | None = None) -> FakeRepository:
        self.repositories[name] = FakeRepository(name=name, git_dir=git_dir)
        return self.repositories[name]

    def add_token(self, token: str, *, write: bool = True) -> None:
        self.tokens[token] = write

    def start(self, port: int = 0) -> FakeForge:
        forge = self

        class Handler(_Handler):
            pass

        Handler.forge = forge
        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def api_url(self, kind: str) -> str:
        return f"http://127.0.0.1:{self.port}{PREFIXES[kind]}"

    # --- a person on the forge

    def set_state(self, repository: str, number: int, state: str) -> FakePull:
        pull = self.repositories[repository].pulls[number]
        pull.state = state
        pull.updated_at = datetime.now(UTC).isoformat()
        return pull

    def webhook(self, kind: str, repository: str, number: int, secret: str) -> tuple[bytes, dict[str, str]]:
        """The body and headers the forge would POST for this pull request's state."""
        pull = self.repositories[repository].pulls[number]
        url = self.html_url(kind, repository, number)
        delivery = str(uuid.uuid4())
        payload: dict[str, Any]
        if kind == "gitlab":
            gitlab_state = {"open": "opened"}.get(pull.state, pull.state)
            payload = {
                "object_kind": "merge_request",
                "project": {"path_with_namespace": repository},
                "object_attributes": {
                    "iid": number,
                    "state": gitlab_state,
                    "url": url,
                    "updated_at": pull.updated_at,
                },
            }
            body = json.dumps(payload).encode()
            return body, {
                "X-Gitlab-Event": "Merge Request Hook",
                "X-Gitlab-Token": secret,
                "X-Gitlab-Event-UUID": delivery,
            }
        payload = {
            "action": "closed" if pull.state != "open" else "opened",
            "number": number,
            "pull_request": self._github_pull(kind, repository, pull),
            "repository": {"full_name": repository},
        }
        body = json.dumps(payload).encode()
        signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        if kind == "github":
            return body, {
                "X-GitHub-Event": "pull_request",
                "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": "sha256=" + signature,
            }
        return body, {"X-Gitea-Event": "pull_request", "X-Gitea-Delivery": delivery, "X-Gitea-Signature": signature}

    # --- answers

    def html_url(self, kind: str, repository: str, number: int) -> str:
        word = "merge_requests" if kind == "gitlab" else "pulls"
        return f"http://127.0.0.1:{self.port}/{kind}-web/{repository}/{word}/{number}"

    def _github_pull(self, kind: str, repository: str, pull: FakePull) -> dict[str, Any]:
        return {
            "number": pull.number,
            "html_url": self.html_url(kind, repository, pull.number),
            "state": "open" if pull.state == "open" else "closed",
            "merged": pull.state == "merged",
            "updated_at": pull.updated_at,
            "title": pull.title,
            "body": pull.body,
            "head": {"ref": pull.head},
            "base": {"ref": pull.base},
        }

    def _gitlab_mr(self, repository: str, pull: FakePull) -> dict[str, Any]:
        return {
            "iid": pull.number,
            "web_url": self.html_url("gitlab", repository, pull.number),
            "state": {"open": "opened"}.get(pull.state, pull.state),
            "title": pull.title,
            "description": pull.body,
            "source_branch": pull.head,
            "target_branch": pull.base,
        }

    def control(self, body: dict[str, Any]) -> tuple[int, Any]:
        """A person on the forge: set a pull request's state and, given a webhook URL
        and secret, deliver the signed event to it as the forge would."""
        try:
            kind, repository, number = str(body["kind"]), str(body["repository"]), int(body["number"])
            with self._lock:
                self.set_state(repository, number, str(body["state"]))
        except (KeyError, TypeError, ValueError) as error:
            return 400, {"message": f"kind, repository, number and state are required ({error})"}
        answer: dict[str, Any] = {"state": body["state"]}
        if body.get("webhook"):
            url = str(body["webhook"])
            if not url.startswith(("http://", "https://")):
                return 400, {"message": "webhook must be an http(s) URL"}
            delivery, headers = self.webhook(kind, repository, number, str(body.get("secret", "")))
            request = urllib.request.Request(url, delivery, {**headers, "Content-Type": "application/json"})  # noqa: S310
            try:
                with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (http(s) only)
                    answer["webhook_status"] = response.status
            except urllib.error.HTTPError as error:
                answer["webhook_status"] = error.code
        return 200, answer

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        if method == "POST" and path == "/_control/state":
            return self.control(body)
        with self._lock:
            self.requests.append(Recorded(method, path, headers, body))
            if self.fail_next:
                return self.fail_next.pop(0), {"message": "Server Error"}
            kind = next((k for k, prefix in PREFIXES.items() if path.startswith(prefix + "/")), None)
            if kind is None:
                return 404, {"message": "Not Found"}
            token = _token(kind, headers)
            if token not in self.tokens:
                return 401, {"message": "Bad credentials" if kind == "github" else "401 Unauthorized"}
            rest = path[len(PREFIXES[kind]) :]
            if kind == "gitlab":
                return self._gitlab(method, rest, body, may_write=self.tokens[token])
            return self._github(kind, method, rest, body, may_write=self.tokens[token])

    def _github(self, kind: str, method: str, rest: str, body: Any, *, may_write: bool) -> tuple[int, Any]:
        match = re.fullmatch(r"/repos/([^/]+/[^/]+)/pulls(?:/(\d+))?", rest)
        if not match or match[1] not in self.repositories:
            return 404, {"message": "Not Found"}
        repository = self.repositories[match[1]]
        if method == "GET" and match[2]:
            pull = repository.pulls.get(int(match[2]))
            return (200, self._github_pull(kind, repository.name, pull)) if pull else (404, {"message": "Not Found"})
        if method != "POST" or match[2]:
            return 405, {"message": "Method Not Allowed"}
        if not may_write:
            return 403, {"message": "Resource not accessible by personal access token"}
        problem = self._check_new(repository, body.get("head", ""), body.get("base", ""), body.get("title", ""))
        if problem:
            if kind == "github":
                return 422, {"message": "Validation Failed", "errors": [{"message": problem}]}
            return 409 if "already exists" in problem else 422, {"message": problem}
        pull = self._create(repository, body["head"], body["base"], body["title"], body.get("body", ""))
        return 201, self._github_pull(kind, repository.name, pull)

    def _gitlab(self, method: str, rest: str, body: Any, *, may_write: bool) -> tuple[int, Any]:
        match = re.fullmatch(r"/projects/([^/]+)/merge_requests(?:/(\d+))?", rest)
        name = unquote(match[1]) if match else ""
        if not match or name not in self.repositories:
            return 404, {"message": "404 Project Not Found"}
        repository = self.repositories[name]
        if method == "GET" and match[2]:
            pull = repository.pulls.get(int(match[2]))
            return (200, self._gitlab_mr(name, pull)) if pull else (404, {"message": "404 Not found"})
        if method != "POST" or match[2]:
            return 405, {"message": "405 Method Not Allowed"}
        if not may_write:
            return 403, {"message": "403 Forbidden"}
        head, base = body.get("source_branch", ""), body.get("target_branch", "")
        problem = self._check_new(repository, head, base, body.get("title", ""))
        if problem:
            return (409 if "already exists" in problem else 422), {"message": [problem]}
        pull = self._create(repository, head, base, body["title"], body.get("description", ""))
        return 201, self._gitlab_mr(name, pull)

    def _check_new(self, repository: FakeRepository, head: str, base: str, title: str) -> str:
        if not head or not base or not title:
            return "head, base and title are required"
        if repository.git_dir is not None:
            for branch in (head, base):
                # The server's storage account owns the remote once it has pushed there:
                # git would call it "dubious" and answer as if the branch were missing.
                trusted = f"safe.directory={repository.git_dir.resolve()}"
                found = subprocess.run(  # noqa: S603
                    ["git", "-c", trusted, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],  # noqa: S607
                    cwd=repository.git_dir,
                    capture_output=True,
                )
                if found.returncode != 0:
                    return f"branch {branch} does not exist on the remote"
        if any(p.head == head and p.state == "open" for p in repository.pulls.values()):
            return f"A pull request already exists for {head}."
        return ""

    def _create(self, repository: FakeRepository, head: str, base: str, title: str, body: str) -> FakePull:
        number = max(repository.pulls, default=0) + 1
        repository.pulls[number] = FakePull(number=number, head=head, base=base, title=title, body=body)
        return repository.pulls[number]


def _token(kind: str, headers: dict[str, str]) -> str:
    lowered = {k.lower(): v for k, v in headers.items()}
    if kind == "gitlab":
        return lowered.get("private-token", "")
    authorization = lowered.get("authorization", "")
    scheme = "Bearer " if kind == "github" else "token "
    return authorization[len(scheme) :] if authorization.startswith(scheme) else ""


class _Handler(BaseHTTPRequestHandler):
    forge: FakeForge

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.forge.unreachable:
            self.close_connection = True
            self.connection.close()
            return
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        if body is None or not isinstance(body, dict):
            status, answer = 400, {"message": "Problems parsing JSON"}
        else:
            status, answer = self.forge.handle(method, self.path, dict(self.headers.items()), body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m llm.demo.forge", description=__doc__)
    parser.add_argument("--port", type=int, default=8091)
    parser.add_argument("--token", action="append", default=[], help="an access token the forge accepts")
    parser.add_argument(
        "--repository", action="append", default=[], help="owner/name[=bare git dir whose branches it checks]"
    )
    args = parser.parse_args(argv)
    forge = FakeForge()
    for token in args.token:
        forge.add_token(token)
    for spec in args.repository:
        name, _, git_dir = spec.partition("=")
        forge.add_repository(name, git_dir=Path(git_dir) if git_dir else None)
    forge.start(port=args.port)
    print(f"Fake forge on http://127.0.0.1:{forge.port}: API base URLs {', '.join(map(forge.api_url, PREFIXES))}")
    with contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()
    forge.stop()


if __name__ == "__main__":
    main()
