"""The fake forge's server: tokens and their scope, the recorded requests, failures on
demand, and the routes — each feature module (``ROUTE_MODULES``) gives its ``ROUTES``
(family "github" for GitHub and Gitea/Forgejo, which share their shapes, or "gitlab"; the
method; a regular expression over the path after the API prefix, whose group ``repo`` names
the repository; the handler) and its ``CONTROLS`` (``/_control/<name>``: a person or a CI
on the forge doing something, then, given a webhook URL and secret, delivering the signed
event as the forge would: ``control_deliver``) and, optionally, its ``DOWNLOADS``
(a regular expression over a path outside the API, served without a token, as a
forge's download host serves a signed URL)."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from . import base_moves, checks, discussions, issues, pulls, reviews
from .answers import Answer, Control, Download, ForgeRequest, Handler, Redirect, not_found
from .state import PREFIXES, FakePull, ForgeState, Recorded

# Every module that serves part of the forge's API; each has ROUTES and CONTROLS.
ROUTE_MODULES: tuple[ModuleType, ...] = (pulls, reviews, discussions, issues, checks, base_moves)


class FakeForge(ForgeState):
    """Start with ``start()``; ``api_url(kind)`` is what the product is configured with."""

    def __init__(self) -> None:
        super().__init__()
        self._routes: list[tuple[str, str, re.Pattern[str], Handler]] = [
            (family, method, re.compile(pattern), handler)
            for module in ROUTE_MODULES
            for family, method, pattern, handler in module.ROUTES
        ]
        self._controls: dict[str, Control] = {
            path: control for module in ROUTE_MODULES for path, control in module.CONTROLS.items()
        }
        self._downloads: list[tuple[re.Pattern[str], Download]] = [
            (re.compile(pattern), download)
            for module in ROUTE_MODULES
            for pattern, download in getattr(module, "DOWNLOADS", {}).items()
        ]

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

    # --- a person on the forge (the tests' shortcuts; the controls do the same over HTTP)

    def set_state(self, repository: str, number: int, state: str) -> FakePull:
        with self.lock:
            return pulls.set_state(self, repository, number, state)

    def webhook(self, kind: str, repository: str, number: int, secret: str) -> tuple[bytes, dict[str, str]]:
        """The body and headers the forge would POST for this pull request's state."""
        return pulls.state_delivery(self, kind, repository, number, secret)

    # --- answers

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any) -> Answer:
        parts = urlsplit(path)
        if method == "POST" and parts.path in self._controls:
            return self._controls[parts.path](self, body)
        with self.lock:
            self.requests.append(Recorded(method, path, headers, body))
            if self.fail_next:
                return self.fail_next.pop(0), {"message": "Server Error"}
            for pattern, download in self._downloads:
                found = pattern.fullmatch(parts.path)
                if found is not None and method == "GET":
                    return download(self, found, dict(parse_qsl(parts.query)))
            kind = next((k for k, prefix in PREFIXES.items() if parts.path.startswith(prefix + "/")), None)
            if kind is None:
                return 404, {"message": "Not Found"}
            token = _token(kind, headers)
            if token not in self.tokens:
                return 401, {"message": "Bad credentials" if kind == "github" else "401 Unauthorized"}
            rest = parts.path[len(PREFIXES[kind]) :]
            family = "gitlab" if kind == "gitlab" else "github"
            query = dict(parse_qsl(parts.query))
            path_matched = False
            for route_family, route_method, pattern, handler in self._routes:
                match = pattern.fullmatch(rest) if route_family == family else None
                if match is None:
                    continue
                path_matched = True
                if route_method != method:
                    continue
                repository = None
                if "repo" in pattern.groupindex:
                    repository = self.repositories.get(unquote(match["repo"]))
                    if repository is None:
                        return not_found(kind)
                request = ForgeRequest(self, kind, method, match, repository, body, query, self.tokens[token], token)
                return handler(request)
            if path_matched:
                return 405, {"message": "Method Not Allowed"}
            return not_found(kind)


# The lists the forges page inside an object: GitHub's check runs and combined status.
PAGED_KEYS = ("check_runs", "statuses")
DEFAULT_PAGE_SIZE = 30


def _paged(path: str, answer: Any) -> tuple[Any, str]:
    """One page of a listing, as the forges serve it (``page`` and ``per_page``, Gitea's
    ``limit``; GitLab's default 20 is the others' 30 here), and the ``Link`` header that
    names the next page when there is one (with every page, as the three forges send it)."""
    parts = urlsplit(path)
    query = dict(parse_qsl(parts.query))
    key = next((k for k in PAGED_KEYS if isinstance(answer, dict) and isinstance(answer.get(k), list)), "")
    items = answer[key] if key else answer
    if not isinstance(items, list):
        return answer, ""
    size = max(1, min(int(query.get("per_page") or query.get("limit") or DEFAULT_PAGE_SIZE), 100))
    page = max(int(query.get("page") or 1), 1)
    chunk = items[(page - 1) * size : page * size]
    links = []
    if page * size < len(items):
        links.append(f'<{urlunsplit(parts._replace(query=urlencode({**query, "page": page + 1})))}>; rel="next"')
    last = max(1, -(-len(items) // size))
    links.append(f'<{urlunsplit(parts._replace(query=urlencode({**query, "page": last})))}>; rel="last"')
    return ({**answer, key: chunk} if key else chunk), ", ".join(links)


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
        if isinstance(answer, Redirect):
            self.send_response(status)
            self.send_header("Location", answer.location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        link = ""
        if method == "GET" and status == 200:
            answer, link = _paged(self.path, answer)
        if isinstance(answer, str | bytes):  # a job's log, as the forges send it
            data = answer.encode() if isinstance(answer, str) else answer
            content_type = "text/plain; charset=utf-8"
        else:
            data, content_type = json.dumps(answer).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if link:
            self.send_header("Link", link)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_PATCH(self) -> None:
        self._answer("PATCH")

    def do_DELETE(self) -> None:
        self._answer("DELETE")


def main(argv: list[str] | None = None) -> None:
    from . import __doc__ as description

    parser = argparse.ArgumentParser(prog="python -m llm.demo.forge", description=description)
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
