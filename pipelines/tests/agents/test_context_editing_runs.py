"""Context editing in a run (llm/context_editing.py): the Coder's conversation carries the
settings' rule to the API, the fake API clears old tool results once past the trigger,
the Coder's live log says what was cleared (each batch once) and the call keeps it;
``CONTEXT_EDITING_TRIGGER_TOKENS=0`` turns it off."""

from __future__ import annotations

import pytest

from llm.context_editing import API_BETA
from llm.demo.context_management import PLACEHOLDER
from pipelines.models import AgentCall, RunStatus
from pipelines.panel import panel_context
from pipelines.runs.services import run_start
from pipelines.tests.repositories import CALC_FILES, log_text
from tests.fake_anthropic import EDITOR, TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Read", "description": "Read the modules", "order": 1}]}
PASS = {"pass": True, "findings": []}
MODULES = {f"app/m{n}.py": "".join(f"VALUE_{n}_{k} = {k}\n" for k in range(400)) for n in range(4)}


@pytest.fixture
def repo_files() -> dict[str, str | bytes]:
    return {**CALC_FILES, **MODULES}


def views() -> list[ToolReply]:
    return [ToolReply(name=EDITOR, input={"command": "view", "path": path}) for path in MODULES]


def coder_requests(fake_llm) -> list:
    return [request for request in fake_llm.requests if EDITOR in request.tool_names]


def test_the_coder_log_shows_what_was_cleared(fake_llm, linked, task, owner, settings) -> None:
    # Each module viewed is ~2,500 tokens: past 6,000 the oldest go, two at a time.
    settings.CONTEXT_EDITING_TRIGGER_TOKENS = 6_000
    settings.CONTEXT_EDITING_KEEP_TOOL_USES = 1
    settings.CONTEXT_EDITING_CLEAR_AT_LEAST = 3_000
    fake_llm.script(ToolReply(input=PLAN), *views(), TextReply("Read them all."), ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL

    requests = coder_requests(fake_llm)
    assert len(requests) == 5
    for request in requests:
        assert API_BETA in request.headers["anthropic-beta"]
        edit = request.body["context_management"]["edits"][0]
        assert edit["trigger"]["value"] == 6_000 and edit["keep"]["value"] == 1
    cleared = [len(request.applied_edits) and request.applied_edits[0]["cleared_tool_uses"] for request in requests]
    gone = cleared[-1]
    assert cleared[0] == 0 and gone >= 2 and cleared == sorted(cleared)
    last_read = [block["content"] for block in requests[-1].tool_results]
    assert last_read[:gone] == [PLACEHOLDER] * gone and "VALUE_3_399" in last_read[-1]
    assert PLACEHOLDER not in last_read[gone:]

    coder_log = log_text(run, "coder")
    batches = sorted(set(cleared) - {0})
    shown = [line for line in coder_log.splitlines() if line.startswith("[Context: cleared")]
    assert len(shown) == len(batches)  # each batch once, not on every later call
    assert shown[-1].startswith(f"[Context: cleared {gone} old tool results (")
    tokens = requests[-1].applied_edits[0]["cleared_input_tokens"]
    assert f"({tokens:,} tokens)" in shown[-1]
    recorded = [call.response.get("context_cleared") for call in AgentCall.objects.filter(run=run, agent="coder")]
    assert recorded[-1] == {"tool_uses": gone, "tokens": tokens}
    # The run panel's Coder pane shows it.
    coder_pane = next(log for log in panel_context(task=task)["logs"] if log["agent"] == "coder")
    assert shown[-1] in "".join(segment.text for segment in coder_pane["segments"])


def test_context_editing_off_sends_nothing_and_clears_nothing(fake_llm, linked, task, owner, settings) -> None:
    settings.CONTEXT_EDITING_TRIGGER_TOKENS = 0
    settings.CONTEXT_EDITING_KEEP_TOOL_USES = 1
    fake_llm.script(ToolReply(input=PLAN), *views(), TextReply("Read them all."), ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    for request in fake_llm.requests:
        assert "context_management" not in request.body
        assert API_BETA not in request.headers.get("anthropic-beta", "")
    assert all("VALUE_" in block["content"] for block in coder_requests(fake_llm)[-1].tool_results)
    assert "[Context: cleared" not in log_text(run, "coder")
