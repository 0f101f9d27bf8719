"""Runs whose agents an OpenAI-compatible endpoint answers: the server's (LLM_PROVIDER=openai)
or a project's own, beside a project that stays on Anthropic.

The endpoint is the tests' fake Chat Completions server (tests/fake_openai.py), a real
local HTTP server; where nothing is scripted it answers as the demo model does, through
the same translation `LLM_PROVIDER=openai make demo` uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from core.crypto import decrypt_secret
from core.tests.test_sandbox import needs_bwrap
from llm.demo.demo_app import BIG_FILE, BUGS
from pipelines.models import AgentCall, RunStatus
from pipelines.review.selectors import run_diff
from pipelines.runs.services import run_start
from pipelines.tests.repositories import log_text
from projects.services import project_create, project_update
from repos.services import repository_link
from tests.factories import TaskFactory
from tests.fake_openai import EDITOR, HttpError, TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Fix add", "description": "add must add", "order": 1}]}
PASS = {"pass": True, "findings": []}
FIX_CALC = ToolReply(
    name=EDITOR,
    input={"command": "str_replace", "path": "app/calc.py", "old_str": "return a - b", "new_str": "return a + b"},
)


def _authorization(request) -> str:
    return {key.lower(): value for key, value in request.headers.items()}["authorization"]


@needs_bwrap
def test_a_whole_run_plans_edits_tests_and_reviews_on_the_openai_endpoint(
    fake_openai, settings, project, owner
) -> None:
    """Unscripted: the demo model, asked through Chat Completions, drives the demo story."""
    settings.LLM_PROVIDER = "openai"
    call_command("repos_demo")
    repository_link(project=project, path="demo-app", test_command="python3 run_tests.py")
    task = TaskFactory(project=project, title="Fix the reorder report")

    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert (run.provider, run.model, run.endpoint) == ("openai", "gpt-4.1", "")
    big = {file.path: file for file in run_diff(run=run).files}[BIG_FILE]
    assert f"+{BUGS[0].new}" in big.unified and f"-{BUGS[0].old}" in big.unified
    coder_log = log_text(run, "coder")
    # The editor, offered as a function, edited the worktree; the tests ran, failed, then passed.
    assert f'→ {EDITOR} {{"command": "str_replace", "path": "{BIG_FILE}"' in coder_log
    assert "error: The tests failed (exit status 1)." in coder_log
    assert "The tests passed (exit status 0)." in coder_log
    assert run.verify_result["passed"] is True
    requests = fake_openai.chat_requests
    assert requests and all(request.wire_body["model"] == "gpt-4.1" for request in requests)
    agents = set(AgentCall.objects.filter(run=run).values_list("agent", flat=True))
    assert {"planner", "coder", "reviewer"} <= agents
    # The server's endpoint is on this machine: its calls cost nothing, and say so by
    # their zero, not by a missing figure.
    assert run.cost_usd == 0 and run.input_tokens > 0


def test_a_rate_limited_call_is_retried_and_the_run_goes_on(fake_openai, settings, linked, task, owner) -> None:
    settings.LLM_PROVIDER = "openai"
    fake_openai.script(
        HttpError(429, "rate_limit_error", "Slow down.", headers={"retry-after": "0"}),
        ToolReply(input=PLAN),
        HttpError(503, "server_error", "Busy."),
        FIX_CALC,
        TextReply("Fixed add."),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    # Each failed request was asked again (six requests for four replies), and only the
    # replies were recorded as calls.
    assert len(fake_openai.chat_requests) == 6
    assert AgentCall.objects.filter(run=run).count() == 4
    assert "return a + b" in run_diff(run=run).files[0].unified


def test_a_refused_key_fails_the_run_with_a_message_naming_the_setting(
    fake_openai, settings, linked, task, owner
) -> None:
    settings.LLM_PROVIDER = "openai"
    fake_openai.script(HttpError(401, "authentication_error", "Incorrect API key provided."))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.FAILED
    assert "OPENAI_API_KEY" in run.error and not run.error_retryable
    assert len(fake_openai.chat_requests) == 1  # permanent: not retried


def test_a_project_on_its_own_endpoint_runs_while_another_stays_on_anthropic(
    fake_openai, fake_llm, settings, owner, client, tmp_path: Path
) -> None:
    from pipelines.tests.repositories import CALC_FILES, committed_repository

    settings.LLM_PROVIDER = "anthropic"
    # A project's own endpoint on this machine: allowed only because the operator allows it.
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    settings.OPENAI_BASE_URL = "https://api.openai.example/v1"  # the server's, not used here
    settings.OPENAI_API_KEY = "sk-server-key-never-sent"
    open_project = project_create(owner=owner, name="On vLLM")
    project_update(
        project=open_project,
        llm_provider="openai",
        llm_base_url=fake_openai.base_url,
        llm_api_key="sk-project-key",
        llm_model="qwen2.5-coder-32b",
    )
    claude_project = project_create(owner=owner, name="On Claude")
    for project in (open_project, claude_project):
        repository_link(
            project=project, path=str(committed_repository(tmp_path / "repos" / f"calc{project.pk}", CALC_FILES))
        )
    fake_openai.script(ToolReply(input=PLAN), FIX_CALC, TextReply("Fixed add."), ToolReply(input=PASS))
    fake_llm.script(ToolReply(input=PLAN), FIX_CALC, TextReply("Fixed add."), ToolReply(input=PASS))

    open_run = drive_in_process(run_start(task=TaskFactory(project=open_project, title="Make add add"), user=owner))
    claude_run = drive_in_process(run_start(task=TaskFactory(project=claude_project, title="Make add add"), user=owner))

    assert open_run.status == claude_run.status == RunStatus.AWAITING_APPROVAL
    assert (open_run.provider, open_run.model, open_run.endpoint) == (
        "openai",
        "qwen2.5-coder-32b",
        fake_openai.base_url,
    )
    assert decrypt_secret(open_run.api_key_encrypted) == "sk-project-key"
    assert (claude_run.provider, claude_run.endpoint) == ("anthropic", "")
    # Each endpoint got only its own project's calls, the project's key and model on its own.
    assert len(fake_openai.chat_requests) == 4 and len(fake_llm.requests) == 4
    assert {_authorization(request) for request in fake_openai.chat_requests} == {"Bearer sk-project-key"}
    assert {request.wire_body["model"] for request in fake_openai.chat_requests} == {"qwen2.5-coder-32b"}
    assert all(not request.chat_completions for request in fake_llm.requests)
    # The card and the run panel say who answered.
    open_run.task.refresh_from_db()
    assert open_run.task.pipeline_state["provider"] == "openai"
    assert open_run.task.pipeline_state["model"] == "qwen2.5-coder-32b"
    client.force_login(owner)
    card = client.get(reverse("tasks:card", args=[open_run.task.pk])).content.decode()
    assert 'data-testid="card-engine"' in card and ">qwen2.5-coder-32b</span>" in card
    assert "(qwen2.5-coder-32b · OpenAI-compatible)" in card
    page = client.get(reverse("tasks:detail", args=[open_run.task.pk])).content.decode()
    assert "qwen2.5-coder-32b · OpenAI-compatible" in page
    claude_page = client.get(reverse("tasks:detail", args=[claude_run.task.pk])).content.decode()
    assert "· Anthropic" in claude_page and "OpenAI-compatible</span>" not in claude_page


def test_an_unpriced_model_on_a_remote_endpoint_shows_its_cost_as_estimated(
    fake_openai, settings, linked, task, owner, client
) -> None:
    settings.LLM_PROVIDER = "openai"
    settings.OPENAI_MODEL = "mystery-70b"
    fake_openai.script(ToolReply(input=PLAN), FIX_CALC, TextReply("Fixed add."), ToolReply(input=PASS))
    from llm.providers import openai_compatible

    # The fake listens on 127.0.0.1; take it for a remote, paid endpoint.
    original = openai_compatible.endpoint_is_local
    openai_compatible.endpoint_is_local = lambda url: False
    try:
        run = drive_in_process(run_start(task=task, user=owner))
    finally:
        openai_compatible.endpoint_is_local = original

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run.cost_usd > 0  # a fallback price, never 0 by mistake
    client.force_login(owner)
    page = client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    assert 'data-testid="cost-estimated"' in page and "no price for mystery-70b" in page


def test_each_agent_uses_the_model_the_project_chose_for_it(
    fake_openai, settings, linked, task, owner, project
) -> None:
    settings.LLM_PROVIDER = "openai"
    project_update(project=project, coder_model="gpt-4.1-mini", reviewer_model="o4-mini")
    fake_openai.script(ToolReply(input=PLAN), FIX_CALC, TextReply("Fixed add."), ToolReply(input=PASS))

    run = drive_in_process(run_start(task=task, user=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert run.model == "gpt-4.1" and run.agent_models == {"coder": "gpt-4.1-mini", "reviewer": "o4-mini"}
    asked = [request.wire_body["model"] for request in fake_openai.chat_requests]
    assert asked == ["gpt-4.1", "gpt-4.1-mini", "gpt-4.1-mini", "o4-mini"]
    recorded = dict(AgentCall.objects.filter(run=run).values_list("agent", "model").distinct())
    assert recorded == {"planner": "gpt-4.1", "coder": "gpt-4.1-mini", "reviewer": "o4-mini"}
    # Changing the project later does not change a started run's models.
    project_update(project=project, coder_model="")
    run.refresh_from_db()
    assert run.model_for("coder") == "gpt-4.1-mini" and run.model_for("planner") == "gpt-4.1"
