"""Messages to a run (pipelines/messages/): a person talks to the working Coder. The
Coder reads a message at its next turn (and acts on it), once, even when its phase is
resumed; a run not working keeps it for its next round; the API and the page send it."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from pipelines.agents import coder
from pipelines.messages.services import BODY_REQUIRED, RUN_ENDED, run_message_send, run_messages_take
from pipelines.models import RunMessage, RunStatus, RunTransition
from pipelines.review.services import run_request_changes
from pipelines.runs.services import run_cancel, run_start
from pipelines.tests.repositories import log_text
from tests.fake_anthropic import EDITOR, Chosen, TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Fix add", "description": "add must add", "order": 1}]}
PASS = {"pass": True, "findings": []}
MESSAGE = "Stop: keep subtract as it is and add a function named plus instead."
VIEW = ToolReply(name=EDITOR, input={"command": "view", "path": "app/calc.py"})
AS_ASKED = ToolReply(
    name=EDITOR, input={"command": "create", "path": "app/plus.py", "file_text": "def plus(a, b):\n    return a + b\n"}
)
AS_PLANNED = ToolReply(
    name=EDITOR,
    input={"command": "str_replace", "path": "app/calc.py", "old_str": "return a - b", "new_str": "return a + b"},
)


def last_turn_text(request) -> str:  # type: ignore[no-untyped-def]
    return json.dumps(request.body["messages"][-1], ensure_ascii=False)


def told(request) -> ToolReply:  # type: ignore[no-untyped-def]
    """The Coder's next move: what the person's message says, if it was told one."""
    return AS_ASKED if MESSAGE in last_turn_text(request) else AS_PLANNED


def test_a_message_sent_mid_run_is_read_at_the_next_turn_and_changes_what_the_coder_does(
    fake_llm, linked, task, owner, monkeypatch
) -> None:
    run = run_start(task=task, user=owner)
    sent = []
    real_run_tool = coder._run_tool

    def person_types_while_the_tool_runs(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not sent:
            sent.append(run_message_send(run=run, author=owner, body=MESSAGE))
        return real_run_tool(*args, **kwargs)

    monkeypatch.setattr(coder, "_run_tool", person_types_while_the_tool_runs)
    fake_llm.script(ToolReply(input=PLAN), VIEW, Chosen(told), TextReply("Added plus."), ToolReply(input=PASS))

    run = drive_in_process(run)

    assert run.status == RunStatus.AWAITING_APPROVAL
    coder_requests = [request for request in fake_llm.requests if EDITOR in request.tool_names]
    assert MESSAGE not in last_turn_text(coder_requests[0])
    assert MESSAGE in last_turn_text(coder_requests[1])  # with the view's result, the next turn
    assert MESSAGE not in last_turn_text(coder_requests[2])  # read once
    assert [change["file_path"] for change in run.file_changes] == ["app/plus.py"]
    assert f"[Message from {owner.display_name or owner.email}: {MESSAGE}]" in log_text(run, "coder")
    message = RunMessage.objects.get()
    assert message.delivered_at is not None and message.delivered_phase == RunStatus.CODING


def test_a_resumed_phase_is_handed_the_same_messages_at_the_same_turn_and_no_others(task, owner, settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-ant-server-key"
    run = run_start(task=task, user=owner)
    entry = RunTransition.objects.filter(run=run).latest("id").pk
    run_message_send(run=run, author=owner, body="first")
    first = run_messages_take(run=run, phase_entry=entry, turn=2)
    run_message_send(run=run, author=owner, body="second")

    # The worker died; the phase starts over and reaches turn 2 again.
    again = run_messages_take(run=run, phase_entry=entry, turn=2)

    assert [m.body for m in first] == ["first"]
    assert [m.body for m in again] == ["first", "second"]  # its own, and what came since
    assert run_messages_take(run=run, phase_entry=entry, turn=3) == []  # nothing twice
    assert run_messages_take(run=run, phase_entry=entry + 1, turn=2) == []  # nor in another phase


def test_a_message_to_a_run_awaiting_approval_is_read_in_its_next_round(fake_llm, linked, task, owner) -> None:
    task.project.learn_distil = False
    task.project.save()
    fake_llm.script(ToolReply(input=PLAN), VIEW, AS_PLANNED, TextReply("Fixed."), ToolReply(input=PASS))
    run = drive_in_process(run_start(task=task, user=owner))
    run_message_send(run=run, author=owner, body=MESSAGE)
    assert RunMessage.objects.get().delivered_at is None

    fake_llm.script(Chosen(told), TextReply("Added plus."), ToolReply(input=PASS))
    run = drive_in_process(run_request_changes(run=run, feedback="One more thing.", actor=owner))

    round_two = [request for request in fake_llm.requests if EDITOR in request.tool_names][3]
    assert MESSAGE in last_turn_text(round_two) and "One more thing." in last_turn_text(round_two)
    assert RunMessage.objects.get().delivered_phase == RunStatus.CODING


def test_over_the_api(owner_client, other_client, task, owner, settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-ant-server-key"
    run = run_start(task=task, user=owner)
    url = f"/api/runs/{run.pk}/messages"

    empty = owner_client.post(url, {"body": "   "}, format="json")
    assert empty.status_code == 400 and "body" in empty.json()["extra"]["fields"]
    assert other_client.post(url, {"body": "hi"}, format="json").status_code == 404
    assert other_client.get(url).status_code == 404

    created = owner_client.post(url, {"body": "Use the parser we have."}, format="json")
    assert created.status_code == 201
    assert created.json()["body"] == "Use the parser we have." and created.json()["delivered"] is False
    assert [m["body"] for m in owner_client.get(url).json()] == ["Use the parser we have."]

    run_cancel(run=run, actor=owner)
    ended = owner_client.post(url, {"body": "too late"}, format="json")
    assert ended.status_code == 409 and ended.json()["message"] == RUN_ENDED
    assert RunMessage.objects.count() == 1


def test_from_the_page(client, task, owner, settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-ant-server-key"
    run = run_start(task=task, user=owner)
    client.force_login(owner)
    refused = client.post(reverse("pipelines:message", args=[run.pk]), {"body": ""}, HTTP_HX_REQUEST="true")
    assert BODY_REQUIRED in refused.content.decode()

    answer = client.post(
        reverse("pipelines:message", args=[run.pk]), {"body": "Mind the <b>tests</b>."}, HTTP_HX_REQUEST="true"
    )
    html = answer.content.decode()
    assert 'data-testid="run-message"' in html and "Mind the &lt;b&gt;tests&lt;/b&gt;." in html
    assert 'data-testid="run-message-waiting"' in html
    page = client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    assert '<label for="run-message-' in page
