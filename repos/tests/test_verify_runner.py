"""The verify runner: the project's test command, isolated, limited and streamed."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from repos.verify import VerifyResult, run_test_command, verify_findings


def verify(tmp_path: Path, command: str, **overrides: object) -> tuple[VerifyResult, list[str]]:
    chunks: list[str] = []
    options: dict[str, object] = {
        "command": command,
        "cwd": tmp_path,
        "timeout": 20,
        "memory_mb": 1024,
        "cpu_seconds": 20,
        "isolate_network": False,
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


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie lingers until init reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    result, _ = verify(tmp_path, f"sleep 300 & echo $! > {pid_file}; sleep 300", timeout=1)
    assert result.timed_out and not result.passed and result.exit_code is None
    child = int(pid_file.read_text())
    time.sleep(0.2)
    assert not _running(child)
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


def test_the_memory_limit_stops_a_memory_hog(tmp_path: Path) -> None:
    hog = f"{sys.executable} -c \"b = bytearray(1024 * 1024 * 1024); print('allocated')\""
    result, _ = verify(tmp_path, hog, memory_mb=256)
    assert not result.passed and "allocated" not in result.output and "MemoryError" in result.output


def test_network_isolation_when_the_platform_allows_it(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    probe = (
        f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2); "
        "print('connected')\""
    )
    try:
        open_result, _ = verify(tmp_path, probe, isolate_network=False)
        isolated, _ = verify(tmp_path, probe, isolate_network=True)
    finally:
        listener.close()
    assert "connected" in open_result.output
    if isolated.network_isolated:
        assert "connected" not in isolated.output and not isolated.passed
    else:
        # Reported truthfully, and said in the output.
        assert "no network isolation" in isolated.output


def test_pytest_failures_become_findings(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text("def test_ok():\n    pass\n\ndef test_bad():\n    assert 1 == 2\n")
    result, _ = verify(tmp_path, f"{sys.executable} -m pytest -q -p no:cacheprovider -p no:django test_sample.py")
    findings = verify_findings(result)
    assert any(f["file"] == "test_sample.py" and "test_bad" in f["message"] for f in findings), findings
