"""schemathesis against the OpenAPI schema: every operation, authenticated, with
generated (valid and invalid) input. No response may be a 5xx, and every response must
match what the schema says (status code, content type, body).

Bounded and repeatable for CI: a fixed number of examples per operation, derandomized.
Generated ids are swapped for ids of real objects of the user, so that operations
reach their real work instead of stopping at 404.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from accounts.services import api_token_create
from pipelines.models import PipelineRun, RunStatus
from tests.factories import TaskFactory

EXAMPLES_PER_OPERATION = 12
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def api_schema(db: None) -> Iterator[Any]:
    from django.core.signals import request_finished, request_started
    from django.core.wsgi import get_wsgi_application
    from django.db import close_old_connections

    # As Django's test client does: the test's transaction holds the connection, which
    # the WSGI handler would otherwise close at the end of each request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        schema = schemathesis.openapi.from_wsgi("/api/schema", get_wsgi_application())
        # Server-Sent Events stream until the client hangs up: not a request/response API.
        yield schema.exclude(path_regex=r"/events$")
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def world(owner, project, settings) -> dict[str, Any]:
    """A user with a token and one of everything, so path ids can resolve."""
    # Starting runs must not call any LLM: no server key, so a start without a key is a
    # clear 400; one with a generated X-Anthropic-Key queues a run no worker takes.
    settings.ANTHROPIC_API_KEY = ""
    settings.LLM_DEMO_MODE = False
    task = TaskFactory(project=project, title="Fuzzed task")
    run = PipelineRun.objects.create(task=task, number=1, status=RunStatus.AWAITING_APPROVAL, model="m")
    _, token = api_token_create(user=owner, name="fuzz")
    return {
        "headers": {"Authorization": f"Token {token}"},
        "ids": {"project_id": project.pk, "task_id": task.pk, "run_id": run.pk},
    }


def _real_ids(case: Any, ids: dict[str, int]) -> None:
    for name, value in list((case.path_parameters or {}).items()):
        # Keep the generated non-numeric ids (they must 404 cleanly); numeric ones point
        # at the user's real objects, or at a session/item id the fuzzer chose.
        if name in ids and re.fullmatch(r"-?\d+", str(value)):
            case.path_parameters[name] = ids[name]


def _fuzz(operation: Any, mode: GenerationMode, world: dict[str, Any], failures: list[str]) -> int:
    calls = 0

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def examples(case: Any) -> None:
        nonlocal calls
        _real_ids(case, world["ids"])
        response = case.call(headers=world["headers"])
        calls += 1
        try:
            case.validate_response(response, checks=CHECKS)
        except (Exception, BaseExceptionGroup) as exc:  # every failure is collected, reported together
            body = response.text[:300] if hasattr(response, "text") else ""
            failures.append(
                f"{case.method} {case.formatted_path} [{mode.value}] → {response.status_code}: {exc}\n{body}"
            )

    try:
        examples()
    except Unsatisfiable:
        # Nothing of this operation can be made invalid (no body, no parameters).
        if mode is not GenerationMode.NEGATIVE:
            raise
    return calls


def test_the_api_never_fails_and_always_matches_its_schema(api_schema: Any, world: dict[str, Any]) -> None:
    """Valid and invalid input for every operation (schemathesis 4's pytest plugin does
    not load under pytest 9, so the operations are driven with hypothesis directly)."""
    failures: list[str] = []
    operations = [result.ok() for result in api_schema.get_all_operations()]
    calls = sum(
        _fuzz(operation, mode, world, failures)
        for operation in operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    )
    assert len(operations) >= 40 and calls >= len(operations) * 2  # the fuzzer did reach every operation
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures[:30])
