"""The verify runner: the project's test command, sandboxed, limited and streamed.

The escape attempts are in core/tests/test_sandbox.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.sandbox import Limits
from core.tests.test_sandbox import needs_bwrap
from repos.verify import STREAM_CUT_MARKER, VerifyResult, run_test_command, verify_findings

pytestmark = needs_bwrap


@pytest.fixture
def tmp_path(tmp_path: Path, settings) -> Path:
    settings.WORKTREES_ROOT = str(tmp_path)
    return tmp_path


def verify(tmp_path: Path, command: str, **overrides: object) -> tuple[VerifyResult, list[str]]:
    chunks: list[str] = []
    limits = {"memory_mb": 1024, "cpu_seconds": 20, "file_size_mb": 64, "processes": 64, "tmp_size_mb": 64}
    limits.update({key: overrides.pop(key) for key in list(overrides) if key in limits})  # type: ignore[misc]
    options: dict[str, object] = {
        "command": command,
        "cwd": tmp_path,
        "timeout": 20,
        "limits": Limits(**limits),
        "max_output_chars": 100_000,
        "on_output": chunks.append,
        "should_cancel": lambda: False,
    }
    options.update(overrides)
    return run_test_command(**options), chunks  # type: ignore[arg-type]


def test_pass_and_fail_with_exit_codes(tmp_path: Path) -> None:
    passed, _ = verify(tmp_path, "echo all good")
    assert passed.passed and passed.exit_code == 0 and "all good" in passed.output
    failed, _ = verify(tmp_path, "echo broken >&2; exit 3")
    assert not failed.passed and failed.exit_code == 3 and "broken" in failed.output
    assert verify_findings(passed) == []
    findings = verify_findings(failed)
    assert findings and "exit code 3" in findings[-1]["message"] and "broken" in findings[-1]["message"]


def test_output_streams_as_it_comes_and_keeps_the_tail(tmp_path: Path) -> None:
    result, chunks = verify(tmp_path, "for i in 1 2 3; do echo step $i; sleep 0.3; done")
    assert result.passed and len(chunks) >= 3 and "".join(chunks).count("step") == 3
    long, _ = verify(tmp_path, "seq 1 50000", max_output_chars=2000)
    assert long.output.endswith("50000\n") and "earlier characters of output dropped" in long.output
    assert len(long.output) < 2500


def test_only_the_first_characters_stream_and_the_cut_is_said_once(tmp_path: Path) -> None:
    result, chunks = verify(
        tmp_path, "seq 1 300000; sleep 5", max_output_chars=2000, max_streamed_chars=10_000, timeout=1
    )
    streamed = "".join(chunks)
    assert streamed.startswith("1\n2\n3\n")
    assert streamed.count(STREAM_CUT_MARKER.format(streamed=10_000, kept=2000)) == 1
    assert "10,000 characters" in streamed and "last 2,000 characters are kept in the result" in streamed
    command_output = streamed.split(STREAM_CUT_MARKER.format(streamed=10_000, kept=2000))[0]
    assert len(command_output) == 10_000
    # Our own words after the cut still stream; the result keeps the tail.
    assert streamed.endswith("[verify: killed after 1 s]\n") and len(streamed) < 10_300
    assert result.timed_out and "300000\n" in result.output and len(result.output) < 2100


def _processes_running(argv: list[str]) -> list[int]:
    """Host PIDs of live (not zombie) processes with exactly this command line."""
    wanted = "\0".join(argv) + "\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_text() != wanted:
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def test_a_timeout_kills_every_process_the_command_started(tmp_path: Path) -> None:
    result, _ = verify(tmp_path, "sleep 3017 & sleep 3017", timeout=1)
    assert result.timed_out and not result.passed and result.exit_code is None
    time.sleep(0.2)
    assert _processes_running(["sleep", "3017"]) == []
    finding = verify_findings(result)[-1]["message"]
    assert "did not finish in time" in finding


def test_cancel_stops_the_command(tmp_path: Path) -> None:
    started = time.monotonic()
    result, _ = verify(tmp_path, "sleep 300", should_cancel=lambda: time.monotonic() - started > 0.5)
    assert result.cancelled and not result.passed


def test_the_command_sees_none_of_the_servers_environment(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-server-secret")
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "config.settings.base")
    monkeypatch.setenv("DATABASE_URL", "postgres://secret@db/prod")
    result, _ = verify(tmp_path, "env")
    assert "PATH=" in result.output and "CI=true" in result.output
    for secret in ("sk-ant-server-secret", "DJANGO_SETTINGS_MODULE", "DATABASE_URL", "SECRET_KEY"):
        assert secret not in result.output


def test_pytest_failures_become_findings(tmp_path: Path) -> None:
    # What pytest prints at the end of a run with a failure (pytest is not in the
    # sandbox's system toolchain here; the summary format is what matters).
    summary = "FAILED test_sample.py::test_bad - assert 1 == 2\n1 failed, 1 passed in 0.01s\n"
    (tmp_path / "summary.txt").write_text(summary)
    result, _ = verify(tmp_path, "cat summary.txt; exit 1")
    findings = verify_findings(result)
    assert any(f["file"] == "test_sample.py" and "test_bad" in f["message"] for f in findings), findings


SECRET_TOKEN = "tok-e2e-5b7d0c1a9f"


def test_the_projects_variables_reach_the_command_and_its_secrets_never_leave_it(tmp_path: Path) -> None:
    """The command really gets the value (it compares it itself), prints it several
    ways (whole, in its environment, split across writes), and none of it comes out."""
    from core.masking import MASK, OutputMasker
    from core.sandbox import ProjectSandbox

    command = (
        'echo "$API_TOKEN"; env; '
        'test "$API_TOKEN" = "' + SECRET_TOKEN + '" && echo token-received; '
        "printf '%s' \"${API_TOKEN%????????}\"; sleep 0.3; printf '%s\\n' \"${API_TOKEN#??????????}\"; "
        'echo "region=$REGION"; printf "%s" "$API_TOKEN"'  # the very end of the output
    )
    project = ProjectSandbox(variables=(("API_TOKEN", SECRET_TOKEN), ("REGION", "eu-west-1")))

    result, chunks = verify(tmp_path, command, project=project, masker=OutputMasker([SECRET_TOKEN]))

    assert result.passed, result.output
    assert "token-received" in result.output and "region=eu-west-1" in result.output
    assert result.output.count(MASK) >= 4  # echoed, in env, split in two writes, at the end
    streamed = "".join(chunks)
    assert "token-received" in streamed
    assert SECRET_TOKEN not in streamed and SECRET_TOKEN not in result.output
    assert all(SECRET_TOKEN not in chunk for chunk in chunks)
    assert "tok-e2e-5b" not in streamed  # not even the first part of the split print


def test_without_a_masker_the_output_is_as_printed(tmp_path: Path) -> None:
    """The masking above is the masker's doing: the same variables unmasked show."""
    from core.sandbox import ProjectSandbox

    project = ProjectSandbox(variables=(("API_TOKEN", SECRET_TOKEN),))

    result, _ = verify(tmp_path, 'echo "$API_TOKEN"', project=project)

    assert SECRET_TOKEN in result.output
