"""The Claude CLI's only way out of its sandbox: run inside it, before the CLI.

``python3 sandbox_relay.py SOCKET LOGIN -- ARGV...`` listens on a free port of the sandbox's
own loopback (the sandbox has no network of the host's), starts ARGV with
``HTTPS_PROXY``/``HTTP_PROXY`` naming that port, and copies every connection made to it
to the unix socket SOCKET, which the server bound into the sandbox: the server's end
(llm/providers/api_relay.py, ``ApiRelay``) lets through only the API the CLI
is configured for. LOGIN is a JSON file of variables for ARGV's environment only (the
CLI's token or key: on bwrap's command line they would show in the server's process
list); it is removed once read. It exits with ARGV's status.

With ``AUTOCODER_RELAY_API=HOST:PORT`` (an API on the host's loopback) it also listens at
that very address inside the sandbox: the sandbox has a loopback of its own, so an agent
that does not use the proxy for loopback addresses (``AUTOCODER_RELAY_NO_PROXY``: opencode
talks to a server of its own there) would otherwise find nothing at its API's address.
Each connection made there goes through SOCKET as a ``CONNECT HOST:PORT`` tunnel, so the
server's end lets through exactly what it lets through for the proxy. Standard library only: it runs with the
sandbox's ``/usr/bin/python3``, not the server's.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading

PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")
RELAY_NO_PROXY = "AUTOCODER_RELAY_NO_PROXY"
RELAY_API = "AUTOCODER_RELAY_API"
HEAD_LIMIT = 65536


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _tunnel(client: socket.socket, path: str, target: str) -> None:
    """``client`` (a connection to the API's own address) through SOCKET: CONNECT first;
    refused, the client is hung up on."""
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
        upstream.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer and len(answer) < HEAD_LIMIT:
            chunk = upstream.recv(65536)
            if not chunk:
                break
            answer += chunk
        head, _, rest = answer.partition(b"\r\n\r\n")
        if head.split(b" ", 2)[1:2] != [b"200"]:
            return
        if rest:
            client.sendall(rest)
        back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        back.start()
        _pump(client, upstream)
        back.join()
    except OSError:
        pass
    finally:
        client.close()
        upstream.close()


def _serve(listener: socket.socket, path: str, target: str = "") -> None:
    """Each connection to ``listener``: copied to SOCKET (the proxy), or tunnelled to
    ``target`` through it (a listener at the API's own address)."""
    while True:
        client, _ = listener.accept()
        if target:
            threading.Thread(target=_tunnel, args=(client, path, target), daemon=True).start()
        else:
            threading.Thread(target=_relay, args=(client, path), daemon=True).start()


def _listen_at_the_api(address: str, path: str) -> None:
    """Stand in for the API at its loopback ``address`` (HOST:PORT) inside the sandbox."""
    host, _, port = address.rpartition(":")
    bound = host.strip("[]")
    bound = "127.0.0.1" if bound == "localhost" else bound
    family = socket.AF_INET6 if ":" in bound else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.bind((bound, int(port)))
    except (OSError, ValueError) as exc:
        print(f"sandbox_relay: cannot listen at {address}: {exc}", file=sys.stderr)
        listener.close()
        return
    listener.listen(64)
    threading.Thread(target=_serve, args=(listener, path, address), daemon=True).start()


def main(arguments: list[str]) -> int:
    path, login_file, separator, *argv = arguments
    if separator != "--" or not argv:
        print("usage: sandbox_relay.py SOCKET LOGIN -- ARGV...", file=sys.stderr)
        return 2
    login: dict[str, str] = {}
    with contextlib.suppress(OSError, ValueError):
        with open(login_file) as handle:
            login = {str(key): str(value) for key, value in json.load(handle).items()}
        os.unlink(login_file)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    proxy = f"http://127.0.0.1:{listener.getsockname()[1]}"
    # Only what the server configured may bypass the relay: the sandbox's own loopback,
    # for an agent that talks to a server of its own there (opencode does). Nothing
    # else of the host's is reachable without the relay anyway.
    bypass = os.environ.get(RELAY_NO_PROXY, "")
    environment = {
        **os.environ,
        **login,
        **dict.fromkeys(PROXY_VARIABLES, proxy),
        "NO_PROXY": bypass,
        "no_proxy": bypass,
    }
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    if os.environ.get(RELAY_API):
        _listen_at_the_api(os.environ[RELAY_API], path)
    child = subprocess.Popen(argv, env=environment)  # noqa: S603 - the server's own argv
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
