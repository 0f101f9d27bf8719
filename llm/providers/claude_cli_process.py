"""The Claude CLI's process, one place for every call: started in its sandbox (or, where
the operator turned that off, as it is) with a private config folder either way, its
output read line by line until it ends, the deadline passes or a cancel, and ended."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from core.exceptions import SandboxUnavailable
from core.sandbox import IMAGE_NEEDS_SANDBOX, process_kill
from core.sandbox_rootfs import ImageRoot

from .base import CancelCheck, Cancelled, ProviderError
from .claude_cli_sandbox import cli_sandbox, private_config

POLL_SECONDS = 0.1


@contextlib.contextmanager
def cli_started(
    argv: list[str],
    executable: str,
    workspace: Path,
    env: dict[str, str],
    stdin: IO[bytes],
    stderr: IO[bytes],
    *,
    sandboxed: bool,
    timeout: float,
    extra_paths: tuple[str, ...],
    test_command: str = "",
    test_variables: tuple[tuple[str, str], ...] = (),
    test_secrets: tuple[str, ...] = (),
    image: ImageRoot | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """The CLI started in its sandbox (or, where the operator turned it off, as it
    is), with a private config folder either way. Tests on a base image need the
    sandbox: without it the call is refused."""
    if not sandboxed and image is not None and test_command:
        raise SandboxUnavailable(IMAGE_NEEDS_SANDBOX.format(reference=image.reference))
    if not sandboxed:
        with (
            private_config(env, test_command, test_variables, test_secrets) as unsandboxed_env,
            _unsandboxed(argv, workspace, unsandboxed_env, stdin, stderr) as child,
        ):
            yield child
        return
    with cli_sandbox(
        argv=argv,
        executable=executable,
        workspace=workspace,
        env=env,
        timeout=timeout,
        extra_paths=extra_paths,
        stdin=stdin,
        stderr=stderr,
        test_command=test_command,
        test_variables=test_variables,
        test_secrets=test_secrets,
        image=image,
    ) as (child, _relay):
        yield child


def output_lines(child: subprocess.Popen[bytes], deadline: float, should_cancel: CancelCheck) -> Iterator[str]:
    """stdout's lines as they come, until it ends, the deadline passes or a cancel."""
    assert child.stdout is not None
    pending = b""
    while time.monotonic() <= deadline and not should_cancel():
        ready, _, _ = select.select([child.stdout], [], [], POLL_SECONDS)
        if not ready:
            continue
        data = os.read(child.stdout.fileno(), 65536)
        if not data:
            if pending.strip():
                yield pending.decode("utf-8", errors="replace")
            return
        pending += data
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.strip():
                yield line.decode("utf-8", errors="replace")


def cli_finished(child: subprocess.Popen[bytes], deadline: float, timeout: float, should_cancel: CancelCheck) -> None:
    """After its output: Cancelled on a cancel, a retryable ProviderError past the
    deadline (the CLI killed either way); else the CLI waited for, and killed if it
    closed its output but went on (its result is in)."""
    if should_cancel():
        process_kill(child)
        raise Cancelled
    if time.monotonic() > deadline:
        process_kill(child)
        raise ProviderError(
            f"Error: the Claude CLI did not finish within {timeout:g} s and was stopped.", retryable=True
        )
    try:
        child.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        process_kill(child)


@contextlib.contextmanager
def _unsandboxed(
    argv: list[str], worktree: Path, env: dict[str, str], stdin: IO[bytes] | None, stderr: IO[bytes]
) -> Iterator[subprocess.Popen[bytes]]:
    """The operator turned the sandbox off (UNSAFE_RUN_TESTS_WITHOUT_SANDBOX)."""
    child = subprocess.Popen(  # noqa: S603 - fixed executable, arguments as a list
        argv,
        cwd=worktree,
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.DEVNULL if stdin is None else stdin,
        env=env,
        start_new_session=True,
    )
    try:
        yield child
    finally:
        process_kill(child)
