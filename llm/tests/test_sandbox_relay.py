"""The relay's half inside an agent's sandbox (llm/providers/sandbox_relay.py) standing in
for an API on the host's loopback: a connection made at the API's own address goes to the
server's half (``ApiRelay``) as a ``CONNECT`` tunnel, which lets through that API only.
End to end (opencode in its sandbox reaching an API on 127.0.0.1) in
pipelines/tests/agents/test_coder_acp.py."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm.providers import sandbox_relay
from llm.providers.api_relay import ApiRelay


class Api:
    """An HTTP API on the server's loopback: answers each request with its own first line."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.socket.accept()
            except OSError:
                return
            with client:
                first_line = client.recv(65536).split(b"\r\n", 1)[0]
                client.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(first_line), first_line))


@pytest.fixture
def api() -> Iterator[Api]:
    service = Api()
    yield service
    service.socket.close()


@pytest.fixture
def relay(api: Api) -> Iterator[ApiRelay]:
    folder = Path(tempfile.mkdtemp(prefix="relay-", dir="/tmp"))
    server_half = ApiRelay(folder, scheme="http", host="127.0.0.1", port=api.port)
    yield server_half
    server_half.close()
    shutil.rmtree(folder)


def tunnelled(relay: ApiRelay, target: str, request: bytes) -> bytes:
    """What the agent receives for ``request`` made at the stand-in for ``target``."""
    agent, stand_in = socket.socketpair()
    worker = threading.Thread(target=sandbox_relay._tunnel, args=(stand_in, str(relay.path), target), daemon=True)
    worker.start()
    agent.settimeout(5)
    received = b""
    try:
        agent.sendall(request)
        agent.shutdown(socket.SHUT_WR)
        while chunk := agent.recv(4096):
            received += chunk
    except (BrokenPipeError, ConnectionResetError):  # hung up on, maybe before the request was written
        pass
    agent.close()
    worker.join(5)
    return received


def test_a_request_at_the_apis_own_address_reaches_the_api_in_origin_form(api: Api, relay: ApiRelay) -> None:
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
    answer = tunnelled(relay, f"127.0.0.1:{api.port}", request)
    assert answer.endswith(b"\r\n\r\nPOST /v1/chat/completions HTTP/1.1"), answer
    assert relay.refused == []


def test_a_stand_in_for_another_address_is_hung_up_on(api: Api, relay: ApiRelay) -> None:
    answer = tunnelled(relay, f"127.0.0.1:{api.port + 1}", b"GET / HTTP/1.1\r\n\r\n")
    assert answer == b""
    assert relay.refused == [f"127.0.0.1:{api.port + 1}"]
