"""docker-compose.yml, checked without a Docker engine (none runs here or in CI).

`docker compose config` needs the Compose v2 plugin, which no registry this project can
reach provides. What it checks is done here instead: the file against the Compose
Specification's JSON schema (the copy check-jsonschema ships), and the references the
schema cannot see — services and volumes named but not defined. The processes must also
stay those of the Procfile that `make up-prod` runs.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.workers import worker_commands

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.mark.slow
def test_the_compose_file_follows_the_compose_specification() -> None:
    result = validate(COMPOSE_FILE)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mistake", "replacement"),
    [
        ("    stop_grace_period: 30s", "    stop_grace_period: [30s]"),  # wrong type
        ("  beat:\n", "  beat:\n    restart_policy: always\n"),  # no such key
    ],
)
def test_the_schema_check_catches_a_broken_file(tmp_path: Path, mistake: str, replacement: str) -> None:
    text = COMPOSE_FILE.read_text()
    assert mistake in text
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace(mistake, replacement, 1))
    assert validate(broken).returncode != 0


def test_every_service_and_volume_named_is_defined(compose: dict[str, Any]) -> None:
    services = compose["services"]
    volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on undefined service {dependency}"
        for mount in service.get("volumes") or []:
            source = mount.split(":", 1)[0]
            if not source.startswith((".", "/", "~")):
                assert source in volumes, f"{name} mounts undefined volume {source}"


def test_the_processes_are_those_of_the_procfile(compose: dict[str, Any]) -> None:
    procfile = {
        name: shlex.split(command)
        for name, command in re.findall(r"^(\w+):\s*(.+)$", (ROOT / "Procfile").read_text(), re.MULTILINE)
    }
    services = compose["services"]
    assert set(procfile) <= set(services)
    for name in ("worker", "beat"):
        assert services[name]["command"] == procfile[name]
    # The web process differs only in where it listens: every interface in a container.
    web = services["web"]["command"]
    assert web[:2] == procfile["web"][:2] == ["python", "deploy/web.py"]
    assert web[-1] == procfile["web"][-1] == "config.asgi:application"
    # X-Forwarded-For is believed only from TRUSTED_PROXIES, never by daphne for anyone.
    assert "--proxy-headers" not in web and "--proxy-headers" not in procfile["web"]
    # Phases wait on the network: each worker process runs them on threads, as many as
    # WORKER_THREADS (settings) says; the launcher starts WORKER_PROCESSES of them.
    worker = procfile["worker"]
    assert worker[:2] == ["python", "deploy/workers.py"], worker
    for command in worker_commands(2, worker[2:]):
        assert command[command.index("-A") - 1 :][:4] == ["celery", "-A", "config", "worker"]
        assert "--pool=threads" in command
        assert not any(part.startswith(("--concurrency", "-c")) for part in command[1:]), command
    # Workers and beat never also run inside web.
    assert all(services[name]["environment"]["EMBEDDED_WORKER"] == "false" for name in procfile)


def test_a_service_that_dies_is_restarted_and_the_migration_runs_once(compose: dict[str, Any]) -> None:
    services = compose["services"]
    # "unless-stopped": Docker restarts a process that exits or is killed (and after a
    # reboot), but not one an operator stopped.
    for name in ("postgres", "redis", "web", "worker", "beat"):
        assert services[name].get("restart") == "unless-stopped", f"{name} is not restarted when it dies"
    assert services["migrate"]["restart"] == "no", "a finished migration must not run again and again"
    # Compose's own restart policy, not Swarm's deploy.restart_policy (ignored by
    # `docker compose up`).
    assert all("restart_policy" not in (service.get("deploy") or {}) for service in services.values())
