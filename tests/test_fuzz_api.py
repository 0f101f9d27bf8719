"""schemathesis against the OpenAPI schema: every operation, authenticated, with
generated (valid and invalid) input. No response may be a 5xx, and every response must
match what the schema says (status code, content type, body).

Bounded and repeatable for CI: a fixed number of examples per operation, derandomized.
Generated ids are swapped for ids of real objects of the user, so that operations
reach their real work instead of stopping at 404.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from rest_framework.test import APIClient
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi._hypothesis import can_negate_headers, can_negate_path_parameters
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from accounts.services import api_token_create
from pipelines.models import PipelineRun, RunStatus
from tests.api_helpers import db_snapshot
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

    examples()
    return calls


def _can_be_made_invalid(operation: Any) -> bool:
    """Whether schemathesis has anything of the operation to break, by its own rule for
    the places a negative case may break (a path parameter without constraints, an
    optional plain header and no body leave nothing). Negative mode on such an operation
    rejects every case until hypothesis gives up (Unsatisfiable), 1.5-3 s each for nothing:
    27 of 86 operations, 44% of this test's time."""
    for location in (
        ParameterLocation.PATH,
        ParameterLocation.HEADER,
        ParameterLocation.COOKIE,
        ParameterLocation.QUERY,
    ):
        if not operation.get_parameter_set(location).schema["properties"]:
            continue
        if location == ParameterLocation.PATH and not can_negate_path_parameters(operation):
            continue
        if location.is_in_header and not can_negate_headers(operation, location):
            continue
        return True
    return bool(operation.body) and any(item.is_negatable for item in operation.body.items)


# The operations are fuzzed in shards, each a test of its own: as one test they were the
# suite's longest by far (a quarter of an xdist worker's time), run by one worker while
# the other had nothing left to do. Shard n takes every SHARDS-th operation from the n-th.
SHARDS = 8


@pytest.mark.parametrize("shard", range(SHARDS))
def test_the_api_never_fails_and_always_matches_its_schema(api_schema: Any, world: dict[str, Any], shard: int) -> None:
    """Valid and invalid input for every operation (schemathesis 4's pytest plugin does
    not load under pytest 9, so the operations are driven with hypothesis directly)."""
    failures: list[str] = []
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 40  # the schema lists every operation
    shard_operations = operations[shard::SHARDS]
    fuzzed = [
        (operation, mode)
        for operation in shard_operations
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if mode is GenerationMode.POSITIVE or _can_be_made_invalid(operation)
    ]
    unreached = [f"{op.method} {op.path} [{mode.value}]" for op, mode in fuzzed if not _fuzz(op, mode, world, failures)]
    assert shard_operations and not unreached  # the fuzzer did reach every operation, in each mode it has
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures[:30])


# --- poisoned input: text no database can hold, ids past the 64-bit range --------------------

LONE_SURROGATE = "\ud800"  # json.dumps escapes it as a client must: "\\ud800"
NUL = "a\x00b"
ID_PAST_MAX = 2**63
ID_PAST_MIN = -(2**63) - 1
BODY_POISONS: list[object] = [LONE_SURROGATE, NUL, ID_PAST_MAX, ID_PAST_MIN]
# A URL carries text as UTF-8 bytes: the "bytes" of a lone surrogate are not UTF-8 and are
# decoded as replacement characters, so the URL variant of the surrogate is those bytes.
URL_POISONS: list[object] = [LONE_SURROGATE, NUL, ID_PAST_MAX, ID_PAST_MIN]
# Whole bodies: unstorable text as a key, and deep inside an unknown field.
BODY_EXTRAS: list[dict[str, object]] = [{LONE_SURROGATE: 1}, {"x\x00": 1}, {"unknown": [{"deep": [LONE_SURROGATE]}]}]


def _url_text(value: object) -> str:
    return quote(str(value).encode("utf-8", "surrogatepass"), safe="")


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _first_valid_case(operation: Any) -> Any:
    """One valid example of the operation (the simplest the generator finds)."""
    found: list[Any] = []

    @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE))
    @settings(
        max_examples=1,
        derandomize=True,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def first(case: Any) -> None:
        found.append(case)

    first()
    return found[0]


def _poisoned_requests(
    spec: dict[str, Any], operation: Any, ids: dict[str, int]
) -> Iterator[tuple[str, str, dict[str, Any] | None]]:
    """(what was poisoned, URL, JSON body) for one operation: each path parameter, query
    parameter and body property in turn set to each poison, the rest of the request valid."""
    definition = spec["paths"][operation.path][operation.method.lower()]
    case = _first_valid_case(operation)
    path_values = {name: str(ids.get(name, value)) for name, value in (case.path_parameters or {}).items()}
    query = {name: value for name, value in (case.query or {}).items() if not isinstance(value, (list, dict))}
    base_body = case.body if isinstance(case.body, dict) else {}

    def url(path_override: dict[str, str] | None = None, query_override: dict[str, object] | None = None) -> str:
        path = operation.path
        for name, value in {**{n: quote(v, safe="") for n, v in path_values.items()}, **(path_override or {})}.items():
            path = path.replace("{" + name + "}", value)
        params = {**query, **(query_override or {})}
        return path + ("?" + "&".join(f"{_url_text(k)}={_url_text(v)}" for k, v in params.items()) if params else "")

    has_body = "requestBody" in definition
    body = dict(base_body) if has_body else None
    for parameter in definition.get("parameters", []):
        name, location = parameter["name"], parameter["in"]
        for poison in URL_POISONS:
            if location == "path":
                yield f"path {name}={poison!r}", url(path_override={name: _url_text(poison)}), body
            elif location == "query":
                yield f"query {name}={poison!r}", url(query_override={name: poison}), body
    if not has_body:
        return
    content = definition["requestBody"]["content"]
    schema = _resolve(spec, content.get("application/json", next(iter(content.values())))["schema"])
    for name in schema.get("properties", {}):
        for poison in BODY_POISONS:
            yield f"body {name}={poison!r}", url(), {**base_body, name: poison}
    for extra in BODY_EXTRAS:
        yield f"body {extra!r}", url(), {**base_body, **extra}


def test_poisoned_input_is_refused_without_a_server_error_or_a_write(
    api_schema: Any, world: dict[str, Any], owner_client: APIClient
) -> None:
    """Every operation, with each parameter and body property in turn set to a lone
    surrogate, a NUL, 2**63 or -2**63-1: never a 5xx, always the error shape, and a
    refused request leaves every table as it was."""
    from drf_spectacular.generators import SchemaGenerator

    spec = SchemaGenerator().get_schema(request=None, public=True)
    client = APIClient(raise_request_exception=False)  # a server error is a failure to report, with the others
    client.credentials(HTTP_AUTHORIZATION=world["headers"]["Authorization"])
    failures: list[str] = []
    calls = 0
    before = db_snapshot()
    for operation in (result.ok() for result in api_schema.get_all_operations()):
        for what, url, body in _poisoned_requests(spec, operation, world["ids"]):
            send = getattr(client, operation.method.lower())
            encoded = json.dumps(body).encode() if body is not None else None
            response = send(url, data=encoded, content_type="application/json") if encoded else send(url)
            calls += 1
            label = f"{operation.method} {operation.path} with {what} → {response.status_code}"
            if response.status_code >= 500:
                failures.append(f"{label}: {response.content[:300]!r}")
                continue
            after = db_snapshot()
            if response.status_code >= 400:
                is_json = response.get("Content-Type", "").startswith("application/json")
                if is_json and set(response.json()) != {"message", "code", "extra"}:
                    failures.append(f"{label}: not the error shape: {response.content[:300]!r}")
                if after != before:
                    failures.append(f"{label}: refused, but the database changed")
            before = after
    assert calls >= 500  # every operation's parameters and properties were reached
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures[:30])
