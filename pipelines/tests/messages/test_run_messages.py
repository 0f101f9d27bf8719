"""Messages to a run (pipelines/messages/): a person talks to the working Coder. The
Coder reads a message at its next turn (and acts on it), once, even when its phase is
resumed; a run not working keeps it for its next round; the API and the page send it."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from pipelines.agents import coder
from pipelines.messages.selectors import NOTE_NOT_READ, NOTE_QUEUED
from pipelines.messages.services import (
    BODY_REQUIRED,
    BODY_TOO_LONG,
    RUN_ENDED,
    RUN_MESSAGE_MAX_LENGTH,
    run_message_send,
    run_messages_take,
)
from pipelines.models import CODER, PLANNER, REVIEWER, RunEvent, RunMessage, RunStatus, RunTransition
from pipelines.phases import reviewing
from pipelines.phases.driver import run_advance
from pipelines.review.services import run_request_changes
from pipelines.runs.services import run_cancel, run_start
from pipelines.tests.repositories import log_text
from tests.fake_anthropic import EDITOR, Chosen, Hang, TextReply, ToolReply
from tests.workers import advance_until_the_worker_stops, drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Fix add", "description": "add must add", "order": 1}]}
PASS = {"pass": True, "findings": []}
MESSAGE = "Stop: keep subtract as it is and add a function named plus instead."
LATER = "And say so in the summary."
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


def test_a_message_read_before_the_worker_died_is_read_once_by_the_resumed_phase(
    fake_llm, linked, task, owner, monkeypatch
) -> None:
    run = run_start(task=task, user=owner)
    real_run_tool = coder._run_tool

    def person_types_while_the_first_tool_runs(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not RunMessage.objects.exists():
            run_message_send(run=run, author=owner, body=MESSAGE)
        return real_run_tool(*args, **kwargs)

    monkeypatch.setattr(coder, "_run_tool", person_types_while_the_first_tool_runs)
    # The Coder reads the message at its second turn and acts on it; the worker stops
    # while its third reply streams.
    fake_llm.script(ToolReply(input=PLAN), VIEW, Chosen(told), Hang(3))
    while run.status != RunStatus.CODING:
        run_advance(run_id=run.pk)
        run.refresh_from_db()
    advance_until_the_worker_stops(run.pk, when=lambda: len(fake_llm.requests) >= 4)
    run.refresh_from_db()
    assert run.status == RunStatus.CODING
    read = RunMessage.objects.get()
    assert (read.delivered_agent, read.delivered_turn) == (CODER, 1)
    later = run_message_send(run=run, author=owner, body=LATER)  # before the phase resumes

    fake_llm.script(Chosen(sees_the_later_message), ToolReply(input=PASS))
    run = drive_in_process(run)

    assert run.status == RunStatus.AWAITING_APPROVAL
    # Its first two turns were reused (the same questions, the message at the same
    # turn): only the third was bought again, then the review.
    assert len(fake_llm.requests) == 4 + 2
    resumed = fake_llm.requests[4]
    assert json.dumps(resumed.body["messages"], ensure_ascii=False).count(MESSAGE) == 1
    assert LATER in last_turn_text(resumed)
    assert "Added plus, as told." in log_text(run, CODER)
    read.refresh_from_db()
    later.refresh_from_db()
    assert read.delivered_turn == 1 and read.delivered_at == RunMessage.objects.get(pk=read.pk).delivered_at
    assert (later.delivered_agent, later.delivered_turn) == (CODER, 2)
    delivered = [e.data for e in RunEvent.objects.filter(run=run, type="run-message") if e.data["delivered"]]
    assert sorted(data["message_id"] for data in delivered) == [read.pk, later.pk]  # each once


def sees_the_later_message(request) -> TextReply:  # type: ignore[no-untyped-def]
    return TextReply("Added plus, as told." if LATER in last_turn_text(request) else "Did not hear.")


def test_the_planner_reads_a_message_sent_before_it_plans(fake_llm, linked, task, owner) -> None:
    run = run_start(task=task, user=owner)
    run_message_send(run=run, author=owner, body=MESSAGE)  # still queued

    def plans_as_told(request) -> ToolReply:  # type: ignore[no-untyped-def]
        told = MESSAGE in last_turn_text(request)
        title = "Add plus, leave subtract" if told else "Fix add"
        return ToolReply(input={"subtasks": [{"id": "s1", "title": title, "description": "-", "order": 1}]})

    fake_llm.script(Chosen(plans_as_told), Chosen(told), TextReply("Added plus."), ToolReply(input=PASS))
    run = drive_in_process(run)

    assert run.plan[0]["title"] == "Add plus, leave subtract"
    message = RunMessage.objects.get()
    assert (message.delivered_agent, message.delivered_phase, message.delivered_turn) == (PLANNER, "planning", 0)
    assert MESSAGE not in last_turn_text(fake_llm.requests[1])  # the Coder is not told it again
    assert f"[Message from {owner.display_name or owner.email}: {MESSAGE}]" in log_text(run, PLANNER)


def test_the_reviewer_reads_a_message_sent_after_the_coder_finished(fake_llm, linked, task, owner, monkeypatch) -> None:
    run = run_start(task=task, user=owner)
    real_call_agent = reviewing.call_agent

    def person_types_as_the_review_starts(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not RunMessage.objects.exists():
            run_message_send(run=run, author=owner, body="Be strict about the tests.")
        return real_call_agent(*args, **kwargs)

    monkeypatch.setattr(reviewing, "call_agent", person_types_as_the_review_starts)

    def reviews_as_told(request) -> ToolReply:  # type: ignore[no-untyped-def]
        strict = "Be strict about the tests." in last_turn_text(request)
        finding = {"file": "app/calc.py", "line": 1, "severity": "major", "message": "No test for add."}
        return ToolReply(input={"pass": False, "findings": [finding]} if strict else PASS)

    fake_llm.script(ToolReply(input=PLAN), AS_PLANNED, TextReply("Fixed."), Chosen(reviews_as_told))
    fake_llm.script(TextReply("Nothing to add."), ToolReply(input=PASS))
    run = drive_in_process(run)

    first_review = next(request for request in fake_llm.requests if request.answer_tool == "submit_review")
    assert "Be strict about the tests." in last_turn_text(first_review)
    assert RunMessage.objects.filter(delivered_agent=REVIEWER, delivered_phase="reviewing").count() == 1
    assert run.status == RunStatus.AWAITING_APPROVAL and run.iteration == 2  # the finding was fixed, reviewed again


def test_a_resumed_phase_is_handed_the_same_messages_at_the_same_turn_and_no_others(task, owner, settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-ant-server-key"
    run = run_start(task=task, user=owner)
    entry = RunTransition.objects.filter(run=run).latest("id").pk
    run_message_send(run=run, author=owner, body="first")
    first = run_messages_take(run=run, agent=CODER, phase_entry=entry, turn=2)
    run_message_send(run=run, author=owner, body="second")

    # The worker died; the phase starts over, reusing the replies it bought: turn 2 is
    # asked again as it was, and what came since waits for a turn it buys.
    replayed = run_messages_take(run=run, agent=CODER, phase_entry=entry, turn=2, replaying=True)
    # Or the replay stopped before turn 2 (a question differed): its own, and what came since.
    bought = run_messages_take(run=run, agent=CODER, phase_entry=entry, turn=1)

    assert [m.body for m in first] == ["first"]
    assert [m.body for m in replayed] == ["first"]
    assert [m.body for m in bought] == ["first", "second"]
    heard = {m.pk for m in bought}
    assert run_messages_take(run=run, agent=CODER, phase_entry=entry, turn=2, heard=heard) == []  # nothing twice
    assert run_messages_take(run=run, agent=CODER, phase_entry=entry + 1, turn=1) == []  # nor in another phase
    assert run_messages_take(run=run, agent=REVIEWER, phase_entry=entry, turn=1) == []  # nor to another agent
    # A stalled worker woke and took one at a turn this attempt had passed: read at its next turn.
    run_message_send(run=run, author=owner, body="third")
    run_messages_take(run=run, agent=CODER, phase_entry=entry, turn=0, heard=heard)
    straggler = run_messages_take(run=run, agent=CODER, phase_entry=entry, turn=3, heard=heard)
    assert [m.body for m in straggler] == ["third"]
    assert list(RunMessage.objects.values_list("delivered_turn", "delivered_agent")) == [
        (1, CODER),
        (1, CODER),
        (3, CODER),
    ]


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
    assert created.json()["note"] == NOTE_QUEUED and created.json()["delivered_agent"] == ""
    assert [m["body"] for m in owner_client.get(url).json()] == ["Use the parser we have."]
    too_long = owner_client.post(url, {"body": "x" * (RUN_MESSAGE_MAX_LENGTH + 1)}, format="json")
    assert too_long.status_code == 400 and "body" in too_long.json()["extra"]["fields"]

    run_cancel(run=run, actor=owner)
    ended = owner_client.post(url, {"body": "too late"}, format="json")
    assert ended.status_code == 409 and ended.json()["message"] == RUN_ENDED
    assert RunMessage.objects.count() == 1
    assert [m["note"] for m in owner_client.get(url).json()] == [NOTE_NOT_READ]  # kept in the run's history


def test_the_service_refuses_by_field(task, owner, settings) -> None:
    settings.ANTHROPIC_API_KEY = "sk-ant-server-key"
    run = run_start(task=task, user=owner)
    with pytest.raises(ValidationError) as empty:
        run_message_send(run=run, author=owner, body=" \n ")
    with pytest.raises(ValidationError) as too_long:
        run_message_send(run=run, author=owner, body="x" * (RUN_MESSAGE_MAX_LENGTH + 1))
    assert empty.value.message_dict == {"body": [BODY_REQUIRED]}
    assert too_long.value.message_dict == {"body": [BODY_TOO_LONG]}


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
    assert 'data-testid="run-message-waiting"' in html and NOTE_QUEUED in html
    assert "Message sent: " + NOTE_QUEUED in html
    page = client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    assert '<label for="run-message-' in page
