"""The verify step: a project's test command, run in a run's worktree.

A subprocess in its own session (a timeout or a cancel kills the whole process group,
forked children included), with CPU, memory and core-file limits, cut off the network
where the platform allows it (a new network namespace), an environment built from
scratch (nothing of the server's: no API keys, no Django settings), and its output
streamed as it comes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CANCEL_POLL_SECONDS = 0.2
NETWORK_UNAVAILABLE = (
    "[verify: no network isolation on this machine (unshare -n failed); running with network access]\n"
)
TAIL_MARKER = "[… {dropped} earlier characters of output dropped …]\n"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PYTEST_FAILED = re.compile(r"^FAILED (?P<file>[^\s:]+)(?:::(?P<test>\S+))?(?: - (?P<message>.*))?$")
_FILE_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')


@dataclass
class VerifyResult:
    exit_code: int | None
    passed: bool
    timed_out: bool
    cancelled: bool
    output: str
    duration_ms: int
    network_isolated: bool


@functools.cache
def _unshare_prefix() -> tuple[str, ...] | None:
    """The command prefix that runs a child without network, or None if none works."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ((unshare, "-n"), (unshare, "-rn")):
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=5, check=False)  # noqa: S603
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return None


def _environment(cwd: Path, home: str) -> dict[str, str]:
    path = SYSTEM_PATH
    venv = cwd / ".venv" / "bin"
    if venv.is_dir():
        path = f"{venv}:{path}"
    return {
        "PATH": path,
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "CI": "true",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }


def _limits(memory_mb: int, cpu_seconds: int) -> Callable[[], None]:
    def apply() -> None:
        memory = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_test_command(
    *,
    command: str,
    cwd: Path,
    timeout: float,
    memory_mb: int,
    cpu_seconds: int,
    isolate_network: bool,
    max_output_chars: int,
    on_output: Callable[[str], None],
    should_cancel: Callable[[], bool],
) -> VerifyResult:
    started = time.monotonic()
    prefix = _unshare_prefix() if isolate_network else None
    chunks: list[str] = []
    kept = 0
    dropped = 0

    def emit(text: str) -> None:
        nonlocal kept, dropped
        if not text:
            return
        on_output(text)
        chunks.append(text)
        kept += len(text)
        # Keep the tail: the failures are at the end.
        while kept > max_output_chars:
            excess = kept - max_output_chars
            if len(chunks[0]) <= excess:
                removed = len(chunks.pop(0))
            else:
                chunks[0] = chunks[0][excess:]
                removed = excess
            kept -= removed
            dropped += removed

    if isolate_network and prefix is None:
        emit(NETWORK_UNAVAILABLE)
    home = tempfile.mkdtemp(prefix="autocoder-verify-")
    argv = [*(prefix or ()), "/bin/sh", "-c", command]
    timed_out = cancelled = False
    try:
        process = subprocess.Popen(  # noqa: S603 - the project owner's own test command, isolated as above
            argv,
            cwd=cwd,
            env=_environment(cwd, home),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_limits(memory_mb, cpu_seconds),
        )
    except OSError as exc:
        shutil.rmtree(home, ignore_errors=True)
        emit(f"The test command could not start: {exc}\n")
        return VerifyResult(None, False, False, False, "".join(chunks), 0, prefix is not None)
    assert process.stdout is not None
    decoder_buffer = b""
    try:
        while True:
            if time.monotonic() - started > timeout:
                timed_out = True
                break
            if should_cancel():
                cancelled = True
                break
            ready, _, _ = select.select([process.stdout], [], [], CANCEL_POLL_SECONDS)
            if not ready:
                continue
            data = os.read(process.stdout.fileno(), 65536)
            if not data:
                break
            decoder_buffer += data
            # Hand over whole UTF-8 characters only.
            text = decoder_buffer.decode("utf-8", errors="ignore")
            consumed = len(text.encode("utf-8"))
            if consumed < len(decoder_buffer) - 3:
                text = decoder_buffer.decode("utf-8", errors="replace")
                consumed = len(decoder_buffer)
            decoder_buffer = decoder_buffer[consumed:]
            emit(text)
    finally:
        # Whatever happened, nothing of the command outlives this call.
        _kill_group(process)
        process.stdout.close()
        shutil.rmtree(home, ignore_errors=True)
    if decoder_buffer:
        emit(decoder_buffer.decode("utf-8", errors="replace"))
    if timed_out:
        emit(f"\n[verify: killed after {timeout:g} s]\n")
    exit_code = None if (timed_out or cancelled) else process.returncode
    output = "".join(chunks)
    if dropped:
        output = TAIL_MARKER.format(dropped=dropped) + output
    return VerifyResult(
        exit_code=exit_code,
        passed=exit_code == 0,
        timed_out=timed_out,
        cancelled=cancelled,
        output=output,
        duration_ms=int((time.monotonic() - started) * 1000),
        network_isolated=prefix is not None,
    )


def verify_findings(result: VerifyResult, *, max_findings: int = 20) -> list[dict[str, Any]]:
    """Review findings from a failed test run: pytest's failed tests where it says
    them, and always one finding with the end of the output."""
    if result.passed:
        return []
    findings: list[dict[str, Any]] = []
    for line in result.output.splitlines():
        match = _PYTEST_FAILED.match(line.strip())
        if match and len(findings) < max_findings - 1:
            message = f"Test failed: {match['test'] or match['file']}" + (
                f" — {match['message']}" if match["message"] else ""
            )
            findings.append({"file": match["file"], "line": None, "severity": "major", "message": message[:2000]})
    if result.timed_out:
        summary = "The test command did not finish in time and was killed."
    elif result.exit_code is None:
        summary = "The test command could not run."
    else:
        summary = f"The test command failed (exit code {result.exit_code})."
    tail = result.output[-1500:].strip()
    findings.append({"file": "", "line": None, "severity": "major", "message": f"{summary}\n{tail}"[:5000]})
    return findings
