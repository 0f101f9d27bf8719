"""Where an ACP coding agent runs: a sandbox of its own, like the Claude CLI's
(llm/providers/claude_cli_sandbox.py), never with the server's rights.

``acp_agent_started`` starts the agent's command in ``sandboxed_program`` with the
worktree at ``/workspace``, a fresh home (the sandbox's tmpfs), the agent's own folders
read-only, and no network of the host's: its one way out is the API it is configured
for, through the same two-halved relay as the CLI's (``sandbox_relay.py`` inside, naming
a loopback port as ``HTTPS_PROXY``/``HTTP_PROXY``; ``ApiRelay`` outside, which connects
only to that host and port). Its environment is only what the registry gives it (its
API's base URL and the like), and its key goes in through the relay's login file, never
on bwrap's command line. It has no shell of ours and needs none: its files and its one
command come to AutoCoder over ACP (llm/acp/client.py), which answers by its own rules.
Its stdin is a pipe of ours (``stdin``), its stdout the process's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from core.sandbox import limits_from_settings, process_kill, sandboxed_program
from core.sandbox_bwrap import SANDBOX_HOME, SYSTEM_PATH
from llm.providers import sandbox_relay as relay_module
from llm.providers.api_relay import RELAY_SOCKET, ApiRelay
from llm.providers.claude_cli_sandbox import LOGIN_FILE, RELAY_FOLDER, _sandbox_python, _socket_folder


@dataclasses.dataclass(frozen=True)
class AgentLaunch:
    """How one registered agent starts: ``command``; ``environment`` (no secret);
    ``secrets`` (its key: the relay's login file); the API it may reach; the folders it
    needs to see (its install)."""

    command: tuple[str, ...]
    environment: dict[str, str]
    secrets: dict[str, str]
    api_url: str
    paths: tuple[str, ...]


@dataclasses.dataclass
class StartedAgent:
    process: subprocess.Popen[bytes]
    stdin: IO[bytes]


def _api_address(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme or "https"
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def _on_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def acp_agent_started(
    launch: AgentLaunch, *, workspace: Path, stderr: IO[bytes], timeout: float, sandboxed: bool = True
) -> Iterator[StartedAgent]:
    """The agent started (see the module's docstring); ended and everything made for
    it removed when the block is left. Unsandboxed only where the operator turned the
    sandbox off (UNSAFE_RUN_TESTS_WITHOUT_SANDBOX): then it runs in the worktree with
    the same small environment. Raises SandboxUnavailable (nothing started)."""
    reader, writer = os.pipe()
    stdin_reader, stdin_writer = os.fdopen(reader, "rb"), os.fdopen(writer, "wb")
    if not sandboxed:
        process = subprocess.Popen(  # noqa: S603 - the registry's command, as configured
            list(launch.command),
            cwd=workspace,
            env={**launch.environment, **launch.secrets, "PATH": launch.environment.get("PATH", SYSTEM_PATH)},
            stdin=stdin_reader,
            stdout=subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,
        )
        stdin_reader.close()
        try:
            yield StartedAgent(process=process, stdin=stdin_writer)
        finally:
            _end(process, stdin_writer)
        return
    python = _sandbox_python()
    tools = Path(tempfile.mkdtemp(prefix="autocoder-acp-tools-"))
    sockets = _socket_folder()
    relay: ApiRelay | None = None
    try:
        scheme, host, port = _api_address(launch.api_url)
        relay = ApiRelay(sockets, scheme=scheme, host=host, port=port)
        shutil.copyfile(Path(relay_module.__file__), tools / "sandbox_relay.py")
        tools.chmod(0o755)
        (tools / "sandbox_relay.py").chmod(0o755)
        login_file = sockets / LOGIN_FILE
        login_file.write_text(json.dumps(launch.secrets))
        login_file.chmod(0o600)
        limits = dataclasses.replace(
            limits_from_settings(),
            memory_mb=0,  # Node and Bun reserve far more address space than they use
            cpu_seconds=max(limits_from_settings().cpu_seconds, int(timeout) + 60),
        )
        inside = {
            "PATH": SYSTEM_PATH,
            **launch.environment,
            "HOME": SANDBOX_HOME,
            "TMPDIR": "/tmp",  # noqa: S108 - the sandbox's own tmpfs
        }
        if _on_loopback(host):
            # An API on the host's loopback (a local model server, the demo's): the
            # sandbox's loopback has the same addresses and nothing of the host's, and an
            # agent may go there directly, not through the proxy (opencode: NO_PROXY). The
            # relay stands in for the API at its address there (sandbox_relay.py).
            inside[relay_module.RELAY_API] = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        argv = [python, f"{tools}/sandbox_relay.py", f"{RELAY_FOLDER}/{RELAY_SOCKET}", f"{RELAY_FOLDER}/{LOGIN_FILE}"]
        read_only = tuple(path for path in (tools, *(Path(p) for p in launch.paths)) if path.exists())
        with sandboxed_program(
            argv=[*argv, "--", *launch.command],
            workspace=workspace,
            limits=limits,
            environment=inside,
            share_network=False,
            read_only=read_only,
            writable=((sockets, RELAY_FOLDER),),
            stdin=stdin_reader,
            stderr=stderr,
        ) as process:
            stdin_reader.close()
            try:
                yield StartedAgent(process=process, stdin=stdin_writer)
            finally:
                _end(process, stdin_writer)
    finally:
        for handle in (stdin_reader, stdin_writer):
            with contextlib.suppress(OSError):
                handle.close()
        if relay is not None:
            relay.close()
        for folder in (tools, sockets):  # the login file too, if the relay never read it
            shutil.rmtree(folder, ignore_errors=True)


def _end(process: subprocess.Popen[bytes], stdin: IO[bytes]) -> None:
    """Its input closed first (an ACP agent ends at EOF), then the whole sandbox killed."""
    with contextlib.suppress(OSError, ValueError):
        stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=2)
    process_kill(process)
