"""deploy/systemd: the production processes without Docker as systemd services, each
restarted whenever it exits, running the Procfile's commands. Checked by reading the
files and, where systemd is installed, with ``systemd-analyze verify`` (no systemd runs
as PID 1 here or in CI, so the restarts themselves are systemd's to keep)."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.supervise import ROOT, read_procfile

UNITS = ROOT / "deploy" / "systemd"
PROCESSES = ("web", "worker", "beat")
INSTALLED_AT = "/opt/autocoder"


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read(UNITS / name)
    return parser


def test_each_process_is_restarted_for_ever_and_belongs_to_the_target() -> None:
    target = unit("autocoder.target")
    assert set(target["Unit"]["Wants"].split()) == {f"autocoder-{name}.service" for name in PROCESSES}
    for name in PROCESSES:
        service = unit(f"autocoder-{name}.service")
        assert service["Service"]["Restart"] == "always", name
        # systemd otherwise gives up after five failed starts in ten seconds.
        assert service["Unit"]["StartLimitIntervalSec"] == "0", name
        assert service["Unit"]["PartOf"] == "autocoder.target"
        assert service["Install"]["WantedBy"] == "autocoder.target"
        assert "EMBEDDED_WORKER=false" in service["Service"]["Environment"].split()
        # The migration runs first, but its failure does not keep the process down.
        assert "autocoder-migrate.service" in service["Unit"]["Wants"].split()
        assert "autocoder-migrate.service" in service["Unit"]["After"].split()
        assert "Requires" not in service["Unit"]
    # A warm shutdown: SIGTERM to the worker alone, time for phases to hand work back.
    worker = unit("autocoder-worker.service")["Service"]
    assert (worker["KillMode"], worker["TimeoutStopSec"]) == ("mixed", "30")
    assert unit("autocoder-migrate.service")["Service"]["Type"] == "oneshot"


def test_the_units_run_the_procfiles_commands() -> None:
    procfile = read_procfile(ROOT / "Procfile")
    for name in PROCESSES:
        command = shlex.split(unit(f"autocoder-{name}.service")["Service"]["ExecStart"])
        expected = shlex.split(procfile[name])
        # systemd has no ${VAR:-default}: the unit sets the defaults in Environment=.
        expected = [
            part.replace("${HOST:-127.0.0.1}", "${HOST}").replace("${PORT:-8000}", "${PORT}") for part in expected
        ]
        assert command == [f"{INSTALLED_AT}/.venv/bin/{expected[0]}", *expected[1:]], name
    web_environment = unit("autocoder-web.service")["Service"]["Environment"].split()
    assert {"HOST=127.0.0.1", "PORT=8000"} <= set(web_environment)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    # Installed where this checkout is, so that verify finds the programs.
    for path in UNITS.iterdir():
        text = path.read_text().replace(f"{INSTALLED_AT}/.venv/bin", str(Path(sys.executable).parent))
        (tmp_path / path.name).write_text(text.replace(INSTALLED_AT, str(ROOT)))
    result = subprocess.run(
        ["systemd-analyze", "verify", *sorted(str(path) for path in tmp_path.iterdir())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Unknown" not in output and "Invalid" not in output, output
