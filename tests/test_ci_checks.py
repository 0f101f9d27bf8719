""".ci/junit_ran.py: CI fails when a topology's pass did not run, ran nothing, or skipped
the tests only that topology runs."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from django.conf import settings


@pytest.fixture(scope="module")
def junit_ran() -> Iterator[ModuleType]:
    """The script, loaded from its path: .ci/ is no package."""
    path = Path(settings.BASE_DIR) / ".ci" / "junit_ran.py"
    spec = importlib.util.spec_from_file_location("junit_ran", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def report(tmp_path: Path, *cases: str) -> Path:
    path = tmp_path / "junit.xml"
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
        + "".join(cases)
        + "</testsuite></testsuites>"
    )
    return path


def ran(test: str) -> str:
    module, name = test.split("::")
    return f'<testcase classname="{module}" name="{name}" time="0.1" />'


def skipped(test: str, reason: str) -> str:
    module, name = test.split("::")
    return (
        f'<testcase classname="{module}" name="{name}" time="0">'
        f'<skipped type="pytest.skip" message="{reason}">{reason}</skipped></testcase>'
    )


PRODUCTION = {
    "topology": "production",
    "must_run": ["tests.test_topology_e2e::"],
    "no_skip_reasons": ["REDIS_URL is unset"],
}


def test_a_pass_that_ran_its_topologys_tests_is_fine(junit_ran: ModuleType, tmp_path: Path) -> None:
    path = report(
        tmp_path,
        ran("tests.test_topology_e2e::test_kill_the_worker"),
        skipped("tests.test_celery::test_embedded_beat", "REDIS_URL is set, so this run's broker is Redis"),
    )
    assert junit_ran.problems(path, **PRODUCTION) == []
    assert junit_ran.main([str(path), "--topology", "production", "--must-run", "tests.test_topology_e2e::"]) == 0


def test_a_pass_that_did_not_run_fails(junit_ran: ModuleType, tmp_path: Path) -> None:
    assert junit_ran.problems(tmp_path / "missing.xml", **PRODUCTION) == [
        f"the production pass did not run: no report at {tmp_path / 'missing.xml'}"
    ]
    assert junit_ran.main([str(tmp_path / "missing.xml"), "--topology", "production"]) == 1


def test_a_pass_that_ran_no_test_fails(junit_ran: ModuleType, tmp_path: Path) -> None:
    everything_skipped = report(tmp_path, skipped("accounts.tests.test_api::test_login", "no reason"))
    assert "the embedded pass ran no test (1 skipped)" in junit_ran.problems(everything_skipped, topology="embedded")
    assert junit_ran.problems(report(tmp_path), topology="embedded") == ["the embedded pass ran no test (0 skipped)"]


def test_a_pass_that_skipped_its_topology_fails(junit_ran: ModuleType, tmp_path: Path) -> None:
    # Everything else ran, but not the production topology's own tests.
    path = report(
        tmp_path,
        ran("accounts.tests.test_api::test_login"),
        skipped("tests.test_topology_e2e::test_kill_the_worker", "REDIS_URL is unset"),
    )
    assert junit_ran.problems(path, **PRODUCTION) == [
        "the production pass did not run 'tests.test_topology_e2e::': the topology's own tests were skipped or missing",
        "the production pass skipped 1 tests for 'REDIS_URL is unset', "
        "e.g. tests.test_topology_e2e::test_kill_the_worker",
    ]


def test_an_unreadable_report_fails(junit_ran: ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text("<testsuites><testsuite>")  # cut short: pytest was killed while writing
    [problem] = junit_ran.problems(path, topology="embedded")
    assert problem.startswith("the embedded pass left an unreadable report")


def _collection_hook():  # type: ignore[no-untyped-def]
    """The root conftest's collection hook (pytest imported it as the module ``conftest``)."""
    return sys.modules["conftest"].pytest_collection_modifyitems


def test_own_topology_is_refused_on_a_test_that_uses_the_test_database(request: pytest.FixtureRequest, db) -> None:
    # This very test uses the test database: marked own_topology, CI's production pass
    # would leave it out although what it checks depends on that pass's database.
    request.node.add_marker(pytest.mark.own_topology)
    with pytest.raises(pytest.UsageError, match="marked own_topology but uses the test database"):
        _collection_hook()(request.config, [request.node])


def test_own_topology_is_accepted_on_a_test_without_the_test_database(request: pytest.FixtureRequest) -> None:
    request.node.add_marker(pytest.mark.own_topology)
    _collection_hook()(request.config, [request.node])  # no error
