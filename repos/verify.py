"""The verify step: a project's test command, run in a run's worktree.

The command runs in the sandbox (core/sandbox.py: bubblewrap, no network, no other
files, an unprivileged account) with memory, process and disk limits for the command as
a whole where the host allows (core/sandbox_limits.py), CPU and file-size limits, a
wall-clock timeout and cancel that end every process it started, and its output
streamed as it comes: at most VERIFY_STREAM_MAX_CHARS of it per command (each streamed
chunk is stored as run events), the last VERIFY_OUTPUT_MAX_CHARS kept in the result. A
command stopped by a limit fails, and its output ends saying which. Where no sandbox can
be made the command does not run at all.
"""

from __future__ import annotations

import os
import re
import select
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.masking import NO_MASKING, OutputMasker
from core.sandbox import NO_PROJECT, SANDBOX_DISABLED_WARNING, Limits, ProjectSandbox, sandboxed_process
from core.sandbox_limits import LimitedProcess
from core.sandbox_probe import sandbox_status

from .runner_output import failing_tests, strip_ansi

CANCEL_POLL_SECONDS = 0.2
TAIL_MARKER = "[… {dropped} earlier characters of output dropped …]\n"
STREAM_CUT_MARKER = (
    "\n[output over {streamed:,} characters: the rest is not streamed; "
    "the last {kept:,} characters are kept in the result]\n"
)
_PYTEST_FAILED = re.compile(r"^FAILED (?P<file>[^\s:]+)(?:::(?P<test>\S+))?(?: - (?P<message>.*))?$")


@dataclass
class VerifyResult:
    exit_code: int | None
    passed: bool
    timed_out: bool
    cancelled: bool
    output: str
    duration_ms: int
    # Both true only when the command ran in the sandbox (no network, nothing of the
    # server's). Results stored before the sandbox existed lack ``sandboxed``.
    network_isolated: bool
    sandboxed: bool = False


class _TailBuffer:
    """The output as it streams, keeping only its last ``limit`` characters: the
    failures are at the end. Only the first ``stream_limit`` characters of the command's
    output are handed to ``on_output`` (each becomes stored run events and goes to every
    page watching): past that the stream says once what is cut, and the result keeps
    the tail as before.

    The command's output goes through ``masker`` first (its secrets, core/masking.py):
    what is streamed and what is kept never holds one. A secret split between two reads
    is caught because the end of each read waits for the next."""

    def __init__(
        self,
        limit: int,
        on_output: Callable[[str], None],
        *,
        stream_limit: int | None = None,
        masker: OutputMasker = NO_MASKING,
    ) -> None:
        self.limit = limit
        self.on_output = on_output
        self.stream_limit = stream_limit
        self.masking = masker.stream()
        self.streamed = 0
        self.chunks: list[str] = []
        self.kept = 0
        self.dropped = 0

    def emit(self, text: str) -> None:
        """The command's output, masked: streamed up to the stream limit, its tail kept."""
        self._put(self.masking.write(text))

    def end_of_output(self) -> None:
        """The command's output has ended: what the masker held back goes out."""
        self._put(self.masking.finish())

    def _put(self, text: str) -> None:
        if text:
            self._stream(text)
            self._keep(text)

    def note(self, text: str) -> None:
        """Our own words about the run (a warning, a timeout): always streamed, and kept,
        after whatever of the command's output was held back."""
        self.end_of_output()
        if text:
            self.on_output(text)
            self._keep(text)

    def _stream(self, text: str) -> None:
        if self.stream_limit is None:
            self.on_output(text)
            return
        room = self.stream_limit - self.streamed
        if room > 0:
            self.on_output(text[:room])
        if room < len(text) and room >= 0:
            self.on_output(STREAM_CUT_MARKER.format(streamed=self.stream_limit, kept=self.limit))
        self.streamed += len(text)

    def _keep(self, text: str) -> None:
        self.chunks.append(text)
        self.kept += len(text)
        while self.kept > self.limit:
            excess = self.kept - self.limit
            if len(self.chunks[0]) <= excess:
                removed = len(self.chunks.pop(0))
            else:
                self.chunks[0] = self.chunks[0][excess:]
                removed = excess
            self.kept -= removed
            self.dropped += removed

    def text(self) -> str:
        self.end_of_output()
        output = "".join(self.chunks)
        return TAIL_MARKER.format(dropped=self.dropped) + output if self.dropped else output


def run_test_command(
    *,
    command: str,
    cwd: Path,
    timeout: float,
    limits: Limits,
    max_output_chars: int,
    on_output: Callable[[str], None],
    should_cancel: Callable[[], bool],
    max_streamed_chars: int | None = None,
    project: ProjectSandbox = NO_PROJECT,
    masker: OutputMasker = NO_MASKING,
) -> VerifyResult:
    """Run ``command`` sandboxed in ``cwd``. Raises SandboxUnavailable, having started
    nothing, where no sandbox can be made. ``on_output`` gets the output as it comes,
    at most ``max_streamed_chars`` of it (None: all); the result keeps the last
    ``max_output_chars``. Both are masked by ``masker`` (the secrets among
    ``project.variables``): nothing that leaves here holds a secret value."""
    started = time.monotonic()
    output = _TailBuffer(max_output_chars, on_output, stream_limit=max_streamed_chars, masker=masker)
    status = sandbox_status()
    if status.disabled:
        output.note(SANDBOX_DISABLED_WARNING)
    timed_out = cancelled = False
    limit_exceeded = ""
    try:
        with sandboxed_process(command=command, workspace=cwd, limits=limits, project=project) as process:
            assert process.stdout is not None
            pending = b""
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
                pending += data
                # Hand over whole UTF-8 characters only.
                text = pending.decode("utf-8", errors="ignore")
                consumed = len(text.encode("utf-8"))
                if consumed < len(pending) - 3:
                    text = pending.decode("utf-8", errors="replace")
                    consumed = len(pending)
                pending = pending[consumed:]
                output.emit(text)
            if pending:
                output.emit(pending.decode("utf-8", errors="replace"))
            if not (timed_out or cancelled):
                process.wait()
            returncode = process.returncode
            process.stdout.close()
        # Known once the sandbox's block is left (the disk is checked once more then).
        if isinstance(process, LimitedProcess):
            limit_exceeded = process.limit_exceeded
            if process.limit_notes:
                output.note("\n" + process.limit_notes)
    except OSError as exc:
        output.note(f"The test command could not start: {exc}\n")
        return VerifyResult(None, False, False, False, output.text(), 0, False, False)
    if limit_exceeded:
        output.note("\n" + limit_exceeded)
    if timed_out:
        output.note(f"\n[verify: killed after {timeout:g} s]\n")
    exit_code = None if (timed_out or cancelled) else returncode
    sandboxed = not status.disabled
    return VerifyResult(
        exit_code=exit_code,
        # Over a limit fails, even where the command ended well before the watcher looked.
        passed=exit_code == 0 and not limit_exceeded,
        timed_out=timed_out,
        cancelled=cancelled,
        output=output.text(),
        duration_ms=int((time.monotonic() - started) * 1000),
        network_isolated=sandboxed,
        sandboxed=sandboxed,
    )


def run_project_tests(
    *,
    command: str,
    worktree: Path,
    on_output: Callable[[str], None],
    should_cancel: Callable[[], bool],
    project: ProjectSandbox = NO_PROJECT,
    masker: OutputMasker = NO_MASKING,
) -> VerifyResult:
    """A project's test command in a run's worktree with the verify settings (timeout,
    sandbox limits, output kept, output streamed): the verify phase and the Coder's
    run_tests both run tests this way, so both stream at most VERIFY_STREAM_MAX_CHARS of
    a command's output as run events. Raises SandboxUnavailable like run_test_command."""
    from django.conf import settings

    from core.sandbox import limits_from_settings

    return run_test_command(
        command=command,
        cwd=worktree,
        timeout=settings.VERIFY_TIMEOUT_SECONDS,
        limits=limits_from_settings(),
        max_output_chars=settings.VERIFY_OUTPUT_MAX_CHARS,
        max_streamed_chars=settings.VERIFY_STREAM_MAX_CHARS,
        on_output=on_output,
        should_cancel=should_cancel,
        project=project,
        masker=masker,
    )


def verify_findings(
    result: VerifyResult, *, max_findings: int = 20, already_failing: Collection[str] = ()
) -> list[dict[str, Any]]:
    """Review findings from a failed test run: pytest's failed tests where it says
    them, and always one finding with the end of the output. Tests that already fail
    on the run's base commit (``already_failing``) are not the change's: none when they
    are all that fails, and named as such in the summary otherwise."""
    if result.passed:
        return []
    known = set(already_failing)
    failing_now = failing_tests(result.output)
    if known and failing_now and set(failing_now) <= known and not result.timed_out and result.exit_code:
        return []
    findings: list[dict[str, Any]] = []
    # Colour codes (a project's --color=yes) would reach the Reviewer and the page as noise.
    output = strip_ansi(result.output)
    for line in output.splitlines():
        match = _PYTEST_FAILED.match(line.strip())
        if match and len(findings) < max_findings - 1:
            test_id = f"{match['file']}::{match['test']}" if match["test"] else match["file"]
            if test_id in known:
                continue
            message = f"Test failed: {match['test'] or match['file']}" + (
                f" — {match['message']}" if match["message"] else ""
            )
            findings.append({"file": match["file"], "line": None, "severity": "major", "message": message[:2000]})
    if result.timed_out:
        summary = "The test command did not finish in time and was killed."
    elif result.exit_code is None:
        summary = "The test command could not run."
    elif result.exit_code == 0:
        summary = "The test command went over a limit of the sandbox."
    else:
        summary = f"The test command failed (exit code {result.exit_code})."
    new = [test for test in failing_now if test not in known]
    if known and failing_now:
        summary += f" New failures: {', '.join(new[:20]) or 'none named'}; already failing on the base commit: " + (
            ", ".join(sorted(known & set(failing_now))[:20]) or "none"
        )
    tail = output[-1500:].strip()
    findings.append({"file": "", "line": None, "severity": "major", "message": f"{summary}\n{tail}"[:5000]})
    return findings
