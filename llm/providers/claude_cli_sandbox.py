"""Where each Claude CLI call runs: a sandbox of its own (core/sandbox.py).

Every call — the Coder editing a worktree, and the Planner's, the Reviewer's and the
assistant's one-shot answers — runs ``sandboxed_program`` with:

- a private ``CLAUDE_CONFIG_DIR`` (a fresh folder on the server, bound at
  ``/home/sandbox/.claude`` and removed after the call: the CLI's transcript of the
  whole prompt, its session files and backups go with it). Of the operator's login only
  what the CLI needs goes in (claude_cli_login.py): the OAuth access token as
  ``CLAUDE_CODE_OAUTH_TOKEN`` (not the refresh token: the CLI cannot refresh, nor rotate
  the operator's login), an API key kept in ``.claude.json`` as ``ANTHROPIC_API_KEY``,
  both in the CLI's environment only; ``settings.json`` and the account part of
  ``.claude.json`` as files.
- no network of the host's: the CLI reaches the API through a proxy of two halves,
  ``sandbox_relay.py`` inside (a loopback port, named by ``HTTPS_PROXY``) and
  :class:`ApiRelay` outside (api_relay.py), on a unix socket bound into the sandbox,
  which connects only to the API's host and port (``ANTHROPIC_BASE_URL``, else
  api.anthropic.com:443).
  Any other host, and every loopback port of the server (Redis, PostgreSQL, the web
  server), is refused.
- for the Coder, the project's test command as one program, ``autocoder-run-tests``,
  which runs it in a sandbox nested in the CLI's (``nested_sandbox_argv``): no network,
  no config folder, a fresh home and ``/tmp``, an environment without the login. The CLI
  may run nothing else through Bash (``--permission-mode dontAsk``) but the commands it
  deems read-only (``pwd``, ``git status``…: a worktree's git config can make those run
  anything), so every command of its Bash tool runs in such a nested sandbox too
  (``CLAUDE_CODE_SHELL_PREFIX``, ``autocoder-shell``); the test runner then nests once more.
- the project's variables (repos/variables.py) for the test command only: the server
  serves them on a unix socket (:class:`VariablesServer`) bound into the Bash tool's
  sandboxes, and the test runner (``sandbox_test_env.py``) reads them there and hands
  them to the nested test sandbox's bwrap through an unlinked file (``--args``). They
  are never in the CLI's environment, on a command line, or in a file its Read tool
  could open; the runner masks the secrets in the output the CLI reads back. (While the
  tests run, their processes are the CLI sandbox's account's like the CLI: a model set
  on it could read them there, as it could write a test that prints them encoded —
  the aim is that they are never handed to it.)

Why a nested sandbox for the tests and not the tests as an MCP tool that the server runs
(repos/verify.py): the test command keeps running in the CLI's own process tree and
time (its Bash timeout, the call's cancel and timeout kill it with the CLI), the
worktree stays handed to the sandbox's account for the whole call (a second sandbox
started from the server would take it back mid-call), and there is no server of ours
for the CLI to talk to: the inner sandbox is built by the same function as every other
and fails closed (bwrap's error is the command's output) where it cannot be made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from core.exceptions import SandboxUnavailable
from core.sandbox import Limits, limits_from_settings, nested_sandbox_argv, sandboxed_program
from core.sandbox_bwrap import SANDBOX_HOME, SANDBOX_ROOT, SYSTEM_PATH
from core.sandbox_rootfs import ImageRoot

from .api_relay import RELAY_SOCKET, ApiRelay
from .claude_cli_login import API_KEY_VARIABLE, api_address, login_environment

SANDBOX_CONFIG = f"{SANDBOX_HOME}/.claude"
TEST_RUNNER = "autocoder-run-tests"
SHELL_PREFIX = "autocoder-shell"
NESTED_PATH = f"{SANDBOX_ROOT}/.venv/bin:{SANDBOX_ROOT}/node_modules/.bin:{SYSTEM_PATH}"
SANDBOX_PYTHON = ("/usr/bin/python3", "/usr/local/bin/python3")
VARIABLES_SOCKET = "variables.sock"
TEST_ENV_HELPER = "sandbox_test_env.py"
RELAY_FOLDER = "/run/autocoder"
LOGIN_FILE = "login.json"
SOCKET_PATH_LIMIT = 100
# The login goes through the relay's login file into the CLI's environment only: on
# bwrap's command line it would show in the server's process list.
LOGIN_VARIABLES = frozenset({"CLAUDE_CODE_OAUTH_TOKEN", API_KEY_VARIABLE})
NO_SANDBOX_PYTHON = (
    "The Claude CLI's sandbox needs python3 under /usr (/usr/bin/python3 or /usr/local/bin/python3) for its "
    "relay to the API; install it (Debian/Ubuntu: apt-get install python3-minimal)."
)


class VariablesServer:
    """The project's variables for the test runner (``sandbox_test_env.py``), on a unix
    socket: each connection is sent ``payload`` and closed."""

    def __init__(self, folder: Path, *, variables: tuple[tuple[str, str], ...], secrets: tuple[str, ...]) -> None:
        self.path = folder / VARIABLES_SOCKET
        self.payload = json.dumps({"variables": [list(pair) for pair in variables], "secrets": list(secrets)}).encode()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(16)
        self._closed = False
        threading.Thread(target=self._serve, daemon=True, name="claude-cli-test-variables").start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with contextlib.suppress(OSError), client:
                client.sendall(self.payload)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()


def _copy_test_env_helper(folder: Path) -> None:
    """The test runner's helper and the masker it imports (core/masking.py: standard
    library only), for the sandbox's own python3."""
    from core import masking

    shutil.copyfile(Path(__file__).with_name(TEST_ENV_HELPER), folder / TEST_ENV_HELPER)
    shutil.copyfile(masking.__file__, folder / "masking.py")


# --- The sandbox of one call ------------------------------------------------------------


def _socket_folder() -> Path:
    """A fresh folder for the relay's socket, on a path short enough for one (108 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="autocoder-claude-relay-"))
    if len(str(folder / RELAY_SOCKET)) < SOCKET_PATH_LIMIT:
        return folder
    folder.rmdir()
    return Path(tempfile.mkdtemp(prefix="autocoder-claude-relay-", dir="/tmp"))


def _sandbox_python() -> str:
    for path in SANDBOX_PYTHON:
        if os.access(path, os.X_OK):
            return path
    raise SandboxUnavailable(NO_SANDBOX_PYTHON)


def shell_prefix_script(nested: list[str]) -> str:
    """``autocoder-shell``: the CLI's Bash tool hands it each command line as ``$1``."""
    comment = "# Every command of the CLI's Bash tool, in a sandbox without network or login."
    return f'#!/bin/sh\n{comment}\nexec {shlex.join(nested)} "$1"\n'


def test_runner_script(argv: list[str], limits: Limits) -> str:
    """``autocoder-run-tests``: ``argv`` (the test command in the nested sandbox, behind
    the helper that gives it the project's variables), with the verify step's memory and
    CPU limits (the CLI's own sandbox has none on memory)."""
    caps = [f"ulimit -t {limits.cpu_seconds}"]
    if limits.memory_mb:
        caps.append(f"ulimit -v {limits.memory_mb * 1024}")
    comment = "# The project's test command, in a sandbox without network or login."
    return f"#!/bin/sh\n{comment}\n{' && '.join(caps)} || exit 125\nexec {shlex.join(argv)}\n"


def with_test_variables(python: str, helper: Path, socket_path: str, argv: list[str], *, at: str) -> list[str]:
    """``argv`` started by the helper that reads the project's variables from
    ``socket_path`` and gives them to it (``at``: where in bwrap's options, or ``env``)."""
    return [python, str(helper), socket_path, at, "--", *argv]


@contextlib.contextmanager
def cli_sandbox(
    *,
    argv: list[str],
    executable: str,
    workspace: Path,
    env: dict[str, str],
    timeout: float,
    extra_paths: tuple[str, ...],
    stdin: IO[bytes] | None,
    stderr: IO[bytes],
    test_command: str = "",
    test_variables: tuple[tuple[str, str], ...] = (),
    test_secrets: tuple[str, ...] = (),
    image: ImageRoot | None = None,
) -> Iterator[tuple[subprocess.Popen[bytes], ApiRelay]]:
    """Start ``argv`` (the CLI) in its sandbox, as the module's docstring describes;
    everything made for the call is gone when the block is left. ``test_variables`` go
    to the test command only; ``test_secrets`` are masked in its output. With ``image``
    (the repository's base image) the test command's nested sandbox runs on the image's
    tree, bound read-only into the CLI's at its own path; the CLI itself and its Bash
    tool's commands stay on the server's /usr (the image need not have a shell's
    tools). Raises SandboxUnavailable (nothing started) where no sandbox can be made."""
    python = _sandbox_python()
    config = Path(tempfile.mkdtemp(prefix="autocoder-claude-config-"))
    # Read-only inside (the relay, the test runner: the CLI cannot change them), and
    # the relay's socket, in a folder handed to the sandbox's account (it connects to it).
    tools = Path(tempfile.mkdtemp(prefix="autocoder-claude-tools-"))
    sockets = _socket_folder()
    relay: ApiRelay | None = None
    variables: VariablesServer | None = None
    try:
        login = login_environment(env, config)
        scheme, host, port = api_address(env, config)
        relay = ApiRelay(sockets, scheme=scheme, host=host, port=port)
        limits = dataclasses.replace(
            limits_from_settings(),
            memory_mb=0,  # Node reserves far more address space than it uses
            cpu_seconds=max(limits_from_settings().cpu_seconds, int(timeout) + 60),
        )
        shutil.copyfile(Path(__file__).with_name("sandbox_relay.py"), tools / "sandbox_relay.py")
        read_only = [tools, *(Path(path) for path in (os.path.dirname(executable), *extra_paths))]
        shell: dict[str, str] = {}
        if test_command:
            variables = VariablesServer(sockets, variables=test_variables, secrets=test_secrets)
            variables_inside = f"{RELAY_FOLDER}/{VARIABLES_SOCKET}"
            _copy_test_env_helper(tools)
            nested = nested_sandbox_argv(["/bin/sh", "-c", test_command], tmp_size_mb=limits.tmp_size_mb, image=image)
            # The variables' options go after bwrap's own (its --clearenv), before the command.
            runner = with_test_variables(
                python, tools / TEST_ENV_HELPER, variables_inside, nested, at=str(len(nested) - 3)
            )
            (tools / TEST_RUNNER).write_text(test_runner_script(runner, limits_from_settings()))
            # bwrap's own options may follow the standard ones: the tools stay on PATH;
            # the variables' socket is there for the test runner.
            on_path = [
                "--ro-bind",
                str(tools),
                str(tools),
                "--ro-bind",
                variables_inside,
                variables_inside,
                "--setenv",
                "PATH",
                f"{tools}:{NESTED_PATH}",
            ]
            if image is not None:
                # The test runner starts from the Bash tool's sandbox: the image's tree
                # is shown, read-only, in the CLI's and in that one, at its own path.
                read_only.append(image.rootfs)
                on_path = ["--ro-bind", str(image.rootfs), str(image.rootfs), *on_path]
            prefix = nested_sandbox_argv([*on_path, "/bin/bash", "-c"], tmp_size_mb=limits.tmp_size_mb)
            (tools / SHELL_PREFIX).write_text(shell_prefix_script(prefix))
            shell = {"CLAUDE_CODE_SHELL_PREFIX": str(tools / SHELL_PREFIX)}
            if not nested[2].startswith("/usr/"):
                read_only.append(Path(nested[2]))  # bwrap itself, where it is not under /usr
        for path in (tools, *tools.iterdir()):
            path.chmod(0o755)
        login_file = sockets / LOGIN_FILE
        login_file.write_text(json.dumps(login))
        login_file.chmod(0o600)
        inside = {
            **{k: v for k, v in env.items() if not k.startswith("XDG_") and k not in LOGIN_VARIABLES},
            "PATH": f"{tools}:{os.path.dirname(executable)}:{SYSTEM_PATH}",
            "HOME": SANDBOX_HOME,
            "TMPDIR": "/tmp",  # noqa: S108 - the sandbox's own tmpfs
            "CLAUDE_CONFIG_DIR": SANDBOX_CONFIG,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            **shell,
        }
        relayed = [
            python,
            f"{tools}/sandbox_relay.py",
            f"{RELAY_FOLDER}/{RELAY_SOCKET}",
            f"{RELAY_FOLDER}/{LOGIN_FILE}",
            "--",
            *argv,
        ]
        with sandboxed_program(
            argv=relayed,
            workspace=workspace,
            limits=limits,
            environment=inside,
            share_network=False,
            read_only=tuple(path for path in read_only if path.exists()),
            writable=((config, SANDBOX_CONFIG), (sockets, RELAY_FOLDER)),
            stdin=stdin,
            stderr=stderr,
        ) as process:
            yield process, relay
    finally:
        if relay is not None:
            relay.close()
        if variables is not None:
            variables.close()
        for folder in (config, tools, sockets):  # the login file too, if the relay never read it
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def private_config(
    env: dict[str, str],
    test_command: str = "",
    test_variables: tuple[tuple[str, str], ...] = (),
    test_secrets: tuple[str, ...] = (),
) -> Iterator[dict[str, str]]:
    """Unsandboxed (the operator's UNSAFE_RUN_TESTS_WITHOUT_SANDBOX): the CLI still gets
    a config folder of its own for the call, removed afterwards, and only its login;
    ``autocoder-run-tests`` runs the test command as it is, as the server, with the
    project's variables (from the socket, as sandboxed) and its secrets masked."""
    config = Path(tempfile.mkdtemp(prefix="autocoder-claude-config-"))
    sockets = _socket_folder()
    variables = VariablesServer(sockets, variables=test_variables, secrets=test_secrets)
    try:
        login = login_environment(env, config)
        _copy_test_env_helper(config)
        runner = with_test_variables(
            _sandbox_python(), config / TEST_ENV_HELPER, str(variables.path), ["/bin/sh", "-c", test_command], at="env"
        )
        (config / TEST_RUNNER).write_text(f"#!/bin/sh\nexec {shlex.join(runner)}\n")
        (config / TEST_RUNNER).chmod(0o700)
        path = f"{config}:{env.get('PATH', SYSTEM_PATH)}"
        yield {**env, **login, "CLAUDE_CONFIG_DIR": str(config), "PATH": path}
    finally:
        variables.close()
        shutil.rmtree(config, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)
