"""Where each Claude CLI call runs: a sandbox of its own (core/sandbox.py).

Every call — the Coder editing a worktree, and the Planner's, the Reviewer's and the
assistant's one-shot answers — runs ``sandboxed_program`` with:

- a private ``CLAUDE_CONFIG_DIR`` (a fresh folder on the server, bound at
  ``/home/sandbox/.claude`` and removed after the call: the CLI's transcript of the
  whole prompt, its session files and backups go with it). Of the operator's login only
  what the CLI needs goes in: the OAuth access token as ``CLAUDE_CODE_OAUTH_TOKEN`` (not
  the refresh token: the CLI cannot refresh, nor rotate the operator's login), an API
  key kept in ``.claude.json`` as ``ANTHROPIC_API_KEY``, both in the CLI's environment
  only; ``settings.json`` and the account part of ``.claude.json`` as files.
- no network of the host's: the CLI reaches the API through a proxy of two halves,
  ``sandbox_relay.py`` inside (a loopback port, named by ``HTTPS_PROXY``) and
  :class:`ApiRelay` here, on a unix socket bound into the sandbox, which connects only
  to the API's host and port (``ANTHROPIC_BASE_URL``, else api.anthropic.com:443).
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
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from core.exceptions import SandboxUnavailable
from core.sandbox import Limits, limits_from_settings, nested_sandbox_argv, sandboxed_program
from core.sandbox_bwrap import SANDBOX_HOME, SANDBOX_ROOT, SYSTEM_PATH
from core.sandbox_rootfs import ImageRoot

from .base import ProviderError

SANDBOX_CONFIG = f"{SANDBOX_HOME}/.claude"
TEST_RUNNER = "autocoder-run-tests"
SHELL_PREFIX = "autocoder-shell"
NESTED_PATH = f"{SANDBOX_ROOT}/.venv/bin:{SANDBOX_ROOT}/node_modules/.bin:{SYSTEM_PATH}"
DEFAULT_API = "https://api.anthropic.com"
SANDBOX_PYTHON = ("/usr/bin/python3", "/usr/local/bin/python3")
RELAY_SOCKET = "api.sock"
VARIABLES_SOCKET = "variables.sock"
TEST_ENV_HELPER = "sandbox_test_env.py"
RELAY_FOLDER = "/run/autocoder"
LOGIN_FILE = "login.json"
SOCKET_PATH_LIMIT = 100
ACCOUNT_KEYS = ("oauthAccount", "userID", "hasCompletedOnboarding")
FORBIDDEN = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
BAD_GATEWAY = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
HEAD_LIMIT = 65536
SETTINGS_LOGIN_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
LOGIN_EXPIRED = (
    "Error: the Claude CLI's login on this server ran out at {when} and each call gets only its access "
    "token, not the refresh token. Run `claude` once as the server's user to renew it, or give the server "
    "a long-lived token (`claude setup-token`) as CLAUDE_CODE_OAUTH_TOKEN."
)
NO_SANDBOX_PYTHON = (
    "The Claude CLI's sandbox needs python3 under /usr (/usr/bin/python3 or /usr/local/bin/python3) for its "
    "relay to the API; install it (Debian/Ubuntu: apt-get install python3-minimal)."
)
CONNECT_TIMEOUT_SECONDS = 10.0
_HOP_HEADERS = (b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization")


# --- The operator's login, as far as the CLI needs it ----------------------------------


def login_environment(env: dict[str, str], config: Path) -> dict[str, str]:
    """Fill ``config`` (the call's CLAUDE_CONFIG_DIR) and return the variables that carry
    the login into the CLI's environment. No token or key is written into ``config``.

    Raises ProviderError where the only login is an access token that has run out (the
    CLI, without the refresh token, could not renew it)."""
    source = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else Path(env.get("HOME", "~"), ".claude")
    account = source / ".claude.json" if env.get("CLAUDE_CONFIG_DIR") else Path(env.get("HOME", "~"), ".claude.json")
    with contextlib.suppress(OSError):
        shutil.copyfile(source / "settings.json", config / "settings.json")
    login: dict[str, str] = {}
    expired_at: float | None = None
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
        oauth = json.loads((source / ".credentials.json").read_text()).get("claudeAiOauth") or {}
        expires = oauth.get("expiresAt")  # milliseconds since the epoch
        if isinstance(expires, int | float) and expires / 1000 < time.time():
            expired_at = expires / 1000
        elif oauth.get("accessToken"):
            login["CLAUDE_CODE_OAUTH_TOKEN"] = str(oauth["accessToken"])
    kept: dict[str, object] = {"hasCompletedOnboarding": True}
    with contextlib.suppress(OSError, ValueError):
        state = json.loads(account.read_text())
        if isinstance(state, dict):
            kept.update({key: state[key] for key in ACCOUNT_KEYS if key in state})
            if state.get("primaryApiKey"):
                login["ANTHROPIC_API_KEY"] = str(state["primaryApiKey"])
    (config / ".claude.json").write_text(json.dumps(kept))
    # A token the operator gave the server itself wins over the login's files.
    login.update({k: v for k, v in env.items() if k in ("CLAUDE_CODE_OAUTH_TOKEN",)})
    if expired_at is not None and not login and not _settings_login(config):
        when = datetime.fromtimestamp(expired_at, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
        raise ProviderError(LOGIN_EXPIRED.format(when=when), retryable=False)
    return login


def _settings_login(config: Path) -> bool:
    """Whether the operator's settings.json gives the CLI a key of its own."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        settings = json.loads((config / "settings.json").read_text())
        variables = settings.get("env") or {}
        return bool(settings.get("apiKeyHelper") or any(variables.get(name) for name in SETTINGS_LOGIN_VARIABLES))
    return False


def api_address(env: dict[str, str], config: Path) -> tuple[str, str, int]:
    """(scheme, host, port) of the API the CLI talks to: ANTHROPIC_BASE_URL from the
    operator's settings.json (the CLI applies its ``env`` over its own environment), else
    from its environment, else Anthropic's."""
    url = ""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        url = str(json.loads((config / "settings.json").read_text()).get("env", {}).get("ANTHROPIC_BASE_URL") or "")
    parts = urlsplit(url or env.get("ANTHROPIC_BASE_URL") or DEFAULT_API)
    scheme = parts.scheme or "https"
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


# --- The server's half of the proxy -----------------------------------------------------


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
            **{k: v for k, v in env.items() if not k.startswith("XDG_") and k != "CLAUDE_CODE_OAUTH_TOKEN"},
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
