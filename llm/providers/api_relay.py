"""The server's half of the Claude CLI's way to the API (``ApiRelay``): a proxy on a unix
socket bound into the CLI's sandbox, which connects only to the API's host and port.
The half inside the sandbox is ``sandbox_relay.py`` (a loopback port, named by
``HTTPS_PROXY``); llm/providers/claude_cli_sandbox.py puts them together."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

RELAY_SOCKET = "api.sock"
FORBIDDEN = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
HEAD_LIMIT = 65536
CONNECT_TIMEOUT_SECONDS = 10.0
_HOP_HEADERS = (b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization")


class ApiRelay:
    """A forward proxy on a unix socket that connects only to one host and port:
    ``CONNECT host:port`` (HTTPS; the TLS is the CLI's own, end to end) or, for an
    ``http://`` API, its requests in absolute form, one per connection. Anything else
    is answered 403 and nothing is connected."""

    def __init__(self, folder: Path, *, scheme: str, host: str, port: int) -> None:
        self.path = folder / RELAY_SOCKET
        self.scheme, self.host, self.port = scheme, host, port
        self.refused: list[str] = []
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(64)
        self._closed = False
        threading.Thread(target=self._serve, daemon=True, name="claude-cli-api-relay").start()

    def close(self) -> None:
        self._closed = True
        with self._lock:
            sockets = [self._listener, *self._sockets]
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _track(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._sockets.add(sock)
        return sock

    def _serve(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(self._track(client),), daemon=True).start()

    def _allowed(self, host: str, port: int) -> bool:
        return host.strip("[]").lower() == self.host and port == self.port

    def _handle(self, client: socket.socket) -> None:
        try:
            head, rest = _read_head(client)
            if head is None:
                return
            request_line, _, headers = head.partition(b"\r\n")
            method, _, target = request_line.decode("latin-1").partition(" ")
            target = target.rsplit(" ", 1)[0]
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                if not (port.isdigit() and self._allowed(host, int(port))):
                    self._refuse(client, target)
                    return
                upstream = self._connect(client)
                if upstream is None:
                    return
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                if rest:
                    upstream.sendall(rest)
                _relay(client, upstream)
                return
            parts = urlsplit(target)
            port_of = parts.port or (443 if parts.scheme == "https" else 80)
            if not (self.scheme == "http" and parts.scheme == "http" and self._allowed(parts.hostname or "", port_of)):
                self._refuse(client, target)
                return
            upstream = self._connect(client)
            if upstream is None:
                return
            origin = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            version = request_line.rsplit(b" ", 1)[-1]
            upstream.sendall(_with_close(f"{method} {origin} ".encode("latin-1") + version, headers) + rest)
            _relay(client, upstream, close_response=True)
        except OSError:
            pass
        finally:
            client.close()

    def _refuse(self, client: socket.socket, target: str) -> None:
        self.refused.append(target)
        with contextlib.suppress(OSError):
            client.sendall(FORBIDDEN)

    def _connect(self, client: socket.socket) -> socket.socket | None:
        try:
            upstream = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_SECONDS)
        except OSError:
            with contextlib.suppress(OSError):
                client.sendall(BAD_GATEWAY)
            return None
        upstream.settimeout(None)
        return self._track(upstream)


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > HEAD_LIMIT:
            return None, b""
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _with_close(first_line: bytes, headers: bytes) -> bytes:
    """A message head with its hop-by-hop headers replaced by ``Connection: close``."""
    kept = [
        line for line in headers.split(b"\r\n") if line and line.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS
    ]
    return b"\r\n".join([first_line, *kept, b"Connection: close"]) + b"\r\n\r\n"


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _relay(client: socket.socket, upstream: socket.socket, *, close_response: bool = False) -> None:
    """Both ways until both ends are done; with ``close_response`` the response's head
    says ``Connection: close`` (the next request comes on a new connection, checked again)."""
    forward = threading.Thread(target=_pump, args=(client, upstream), daemon=True)
    forward.start()
    try:
        if close_response:
            head, rest = _read_head(upstream)
            if head is None:
                return
            status, _, headers = head.partition(b"\r\n")
            client.sendall(_with_close(status, headers) + rest)
        _pump(upstream, client)
    finally:
        forward.join(timeout=1)
        upstream.close()
