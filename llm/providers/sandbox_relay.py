"""The Claude CLI's only way out of its sandbox: run inside it, before the CLI.

``python3 sandbox_relay.py SOCKET LOGIN -- ARGV...`` listens on a free port of the sandbox's
own loopback (the sandbox has no network of the host's), starts ARGV with
``HTTPS_PROXY``/``HTTP_PROXY`` naming that port, and copies every connection made to it
to the unix socket SOCKET, which the server bound into the sandbox: the server's end
(llm/providers/api_relay.py, ``ApiRelay``) lets through only the API the CLI
is configured for. LOGIN is a JSON file of variables for ARGV's environment only (the
CLI's token or key: on bwrap's command line they would show in the server's process
list); it is removed once read. It exits with ARGV's status. Standard library only: it runs with the
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


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_relay, args=(client, path), daemon=True).start()


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
    child = subprocess.Popen(argv, env=environment)  # noqa: S603 - the server's own argv
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
