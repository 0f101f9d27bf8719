"""The Claude CLI's test runner's second half: the project's variables for the test
command only, its secrets masked in what the CLI (and its model) reads back.

``python3 sandbox_test_env.py SOCKET AT -- ARGV...`` connects to the unix socket
SOCKET, which the server serves (llm/providers/claude_cli_sandbox.py,
``VariablesServer``) and binds into the sandbox the CLI's Bash commands run in, reads
``{"variables": [[name, value]…], "secrets": [value…]}``, and starts ARGV with the
variables:

- ``AT`` a number: ARGV is ``env -i bwrap …`` (the nested test sandbox) and the
  variables go in as bwrap options read from an unlinked file (``--args FD``) at
  index AT, after bwrap's own ``--clearenv`` and before the command: neither the CLI's
  environment, nor bwrap's command line, nor a file the CLI can open holds them;
- ``AT`` ``env``: ARGV gets them in its environment (the operator turned the sandbox
  off).

ARGV's output (stdout and stderr together) is copied to stdout with every secret
masked (masking.py, copied beside this file: core/masking.py). It exits with ARGV's
status. Standard library only: it runs with the sandbox's ``/usr/bin/python3``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile

from masking import OutputMasker  # beside it in the sandbox (core/masking.py)

RECEIVE_LIMIT = 4 * 1024 * 1024


def _received(path: str) -> tuple[list[tuple[str, str]], list[str]]:
    data = b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(path)
        while len(data) < RECEIVE_LIMIT and (chunk := connection.recv(65536)):
            data += chunk
    payload = json.loads(data)
    variables = [(str(name), str(value)) for name, value in payload.get("variables", [])]
    return variables, [str(value) for value in payload.get("secrets", [])]


def main(arguments: list[str]) -> int:
    path, at, separator, *argv = arguments
    if separator != "--" or not argv:
        print("usage: sandbox_test_env.py SOCKET AT|env -- ARGV...", file=sys.stderr)
        return 2
    try:
        variables, secrets = _received(path)
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        print(f"autocoder-run-tests: the project's variables could not be read ({exc}).", file=sys.stderr)
        return 125
    environment = dict(os.environ)
    pass_fds: tuple[int, ...] = ()
    with tempfile.TemporaryFile() as options:
        if at == "env":
            environment.update(variables)
        else:
            options.write(b"".join(b"--setenv\0%s\0%s\0" % (k.encode(), v.encode()) for k, v in variables))
            options.flush()
            options.seek(0)
            index = int(at)
            argv = [*argv[:index], "--args", str(options.fileno()), *argv[index:]]
            pass_fds = (options.fileno(),)
        child = subprocess.Popen(  # noqa: S603 - the server's own argv
            argv, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=pass_fds
        )
    assert child.stdout is not None
    stream = OutputMasker(secrets).stream()
    out = sys.stdout.buffer
    pending = b""
    while data := os.read(child.stdout.fileno(), 65536):
        pending += data
        text = pending.decode("utf-8", errors="ignore")
        consumed = len(text.encode("utf-8"))
        if consumed < len(pending) - 3:  # not a character cut short: bytes that are no UTF-8
            text, consumed = pending.decode("utf-8", errors="replace"), len(pending)
        pending = pending[consumed:]
        out.write(stream.write(text).encode("utf-8"))
        out.flush()
    out.write((stream.write(pending.decode("utf-8", errors="replace")) + stream.finish()).encode("utf-8"))
    out.flush()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
