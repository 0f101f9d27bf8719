"""Agents that learn: a request for changes and the findings a fix round fixed become
memories the next tasks of the project recall; an approval reinforces what the run was
given and adds to the Coder's notes in its project references to what it taught (read
anew at every prompt); the distillation call is costed on the run."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from memory.embeddings import embed_text, vector_from_bytes
from memory.models import AgentNote, Memory
from memory.services.notes import notes_append
from memory.services.semantic import memory_delete, memory_embedding_text, memory_update_content
from pipelines.agents.recall import NOTES_HEADING
from pipelines.learning.lessons import LESSON_MEMORY_TYPE
from pipelines.models import AgentCall, PipelineRun, RunStatus
from pipelines.review.services import run_approve, run_request_changes
from pipelines.runs.services import run_start
from tasks.models import Task
from tests.factories import ProjectFactory, TaskFactory
from tests.fake_anthropic import EDITOR, HttpError, RecordedRequest, ToolReply, coder_creates, coder_replaces
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PLAN = {"subtasks": [{"id": "s1", "title": "Endpoint", "description": "A JSON endpoint", "order": 1}]}
PASS = {"pass": True, "findings": []}
FEEDBACK = "Use snake_case for API fields"
SNAKE_LESSON = "Name API response fields in snake_case."
FINDING = "List views must validate the page_size query parameter"
FINDING_LESSON = "Validate the page_size query parameter in every list view."
FAIL = {"pass": False, "findings": [{"file": "app/api.py", "line": 3, "severity": "major", "message": FINDING}]}


def api_task(project, what: str = "orders") -> Task:
    return TaskFactory(
        project=project,
        title=f"Add an API endpoint that lists {what} as JSON",
        description=f"Return the signed-in user's {what} from /api/{what} with their fields.",
    )


def paginated_task(project, what: str) -> Task:
    return TaskFactory(
        project=project,
        title=f"Add a paginated API endpoint that lists {what}",
        description=f"Return the signed-in user's {what} from /api/{what}, a page at a time.",
    )


def lessons_reply(*lessons: str) -> ToolReply:
    return ToolReply(input={"lessons": list(lessons)})


def awaiting(fake_llm, task: Task, owner, *replies) -> PipelineRun:
    fake_llm.script(*replies)
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    return run


def passing_run(
    fake_llm, task: Task, owner, path: str = "app/api.py", text: str = "fields = ['orderId']\n"
) -> PipelineRun:
    """A run that plans, creates ``path`` and passes its review: awaiting approval."""
    return awaiting(fake_llm, task, owner, ToolReply(input=PLAN), *coder_creates(path, text), ToolReply(input=PASS))


def with_changes_requested(fake_llm, run: PipelineRun, owner, *distilled: ToolReply) -> PipelineRun:
    fake_llm.script(
        *distilled,
        *coder_replaces("app/api.py", "orderId", "order_id"),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_request_changes(run=run, feedback=FEEDBACK, actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    return run


def requests_of(fake_llm, agent_tool: str) -> list[RecordedRequest]:
    """The requests an agent made, told by the tool that answers for it."""
    if agent_tool == EDITOR:
        return [request for request in fake_llm.requests if EDITOR in request.tool_names]
    return [request for request in fake_llm.requests if request.answer_tool == agent_tool]


def test_a_request_for_changes_reaches_the_next_tasks_coder_in_the_same_project_only(fake_llm, project, owner) -> None:
    run = with_changes_requested(
        fake_llm, passing_run(fake_llm, api_task(project), owner), owner, lessons_reply(SNAKE_LESSON)
    )

    (memory,) = Memory.objects.filter(owner=owner, memory_type=LESSON_MEMORY_TYPE)
    assert (memory.content, memory.agent, memory.project_id) == (SNAKE_LESSON, "coder", project.pk)
    assert (memory.source, memory.source_run_id, memory.decay_policy) == ("distilled", run.pk, "reinforceable")
    assert "request for changes" in memory.source_note and f"run {run.number}" in memory.source_note
    # The distiller read the person's words, and only them: no memories, no notes.
    (distill,) = requests_of(fake_llm, "record_lessons")
    assert FEEDBACK in distill.prompt_text and "What the team taught you" not in distill.system_text
    # This run's own Coder had the feedback in its task, not again as a memory.
    assert all(SNAKE_LESSON not in request.system_text for request in requests_of(fake_llm, EDITOR))
    assert run.lessons[0]["kind"] == "feedback" and run.lessons[0]["memories"][0]["id"] == memory.pk

    fake_llm.reset()
    second = passing_run(
        fake_llm, api_task(project, "customers"), owner, "app/customers.py", "fields = ['customer_id']\n"
    )
    coder_systems = [request.system_text for request in requests_of(fake_llm, EDITOR)]
    assert coder_systems and all(f"- {SNAKE_LESSON}" in system for system in coder_systems)
    coder_call = AgentCall.objects.filter(run=second, agent="coder").first()
    assert coder_call is not None and [m["id"] for m in coder_call.recalled["memories"]] == [memory.pk]
    # Scoped to the Coder: the Reviewer of the next task is not told.
    assert all(SNAKE_LESSON not in request.system_text for request in requests_of(fake_llm, "submit_review"))

    fake_llm.reset()
    elsewhere = ProjectFactory(owner=owner)
    passing_run(fake_llm, api_task(elsewhere, "customers"), owner, "app/customers.py", "fields = []\n")
    assert all(SNAKE_LESSON not in request.system_text for request in fake_llm.requests)


def test_without_distillation_the_feedback_is_kept_as_written(fake_llm, project, owner) -> None:
    project.learn_distil = False
    project.save()
    run = with_changes_requested(fake_llm, passing_run(fake_llm, api_task(project), owner), owner)
    assert not requests_of(fake_llm, "record_lessons")
    (memory,) = Memory.objects.filter(owner=owner, memory_type=LESSON_MEMORY_TYPE)
    assert (memory.content, memory.source, memory.agent) == (FEEDBACK, "feedback", "coder")
    assert not AgentCall.objects.filter(run=run, agent="distiller").exists()


def test_the_same_request_in_another_task_reinforces_the_lesson_instead_of_adding_one(fake_llm, project, owner) -> None:
    project.learn_distil = False
    project.save()
    with_changes_requested(fake_llm, passing_run(fake_llm, api_task(project), owner), owner)
    fake_llm.reset()
    second = passing_run(fake_llm, api_task(project, "customers"), owner)
    fake_llm.script(*coder_replaces("app/api.py", "orderId", "order_id"), ToolReply(input=PASS))
    drive_in_process(run_request_changes(run=second, feedback="Use snake_case for the API fields.", actor=owner))

    (memory,) = Memory.objects.filter(owner=owner, memory_type=LESSON_MEMORY_TYPE)
    assert memory.reinforce_count == 1
    assert memory.content == "Use snake_case for the API fields."  # the longer wording
    second.refresh_from_db()
    assert second.lessons[0]["memories"][0] == {
        "id": memory.pk,
        "agent": "coder",
        "content": memory.content,
        "how": "reinforced",
    }


def test_a_finding_a_fix_round_fixed_reaches_the_next_tasks_reviewer(fake_llm, project, owner) -> None:
    project.lesson_half_life_hours = 48
    project.save()
    run = awaiting(
        fake_llm,
        api_task(project),
        owner,
        ToolReply(input=PLAN),
        *coder_creates("app/api.py", "def orders(request): ...\n"),
        ToolReply(input=FAIL),
        *coder_replaces("app/api.py", "...", "validate(request)"),
        ToolReply(input=PASS),
        lessons_reply(FINDING_LESSON),
    )
    (distill,) = requests_of(fake_llm, "record_lessons")
    assert FINDING in distill.prompt_text and "app/api.py" in distill.prompt_text
    lessons = Memory.objects.filter(owner=owner, memory_type=LESSON_MEMORY_TYPE).order_by("agent")
    assert [(m.agent, m.content, m.decay_policy, m.half_life_hours) for m in lessons] == [
        ("coder", FINDING_LESSON, "contextual", 48.0),
        ("reviewer", FINDING_LESSON, "contextual", 48.0),
    ]
    assert {m.source_run_id for m in lessons} == {run.pk}
    assert "review findings" in lessons[0].source_note

    fake_llm.reset()
    passing_run(fake_llm, paginated_task(project, "invoices"), owner, "app/invoices.py", "def invoices(request): ...\n")
    (review,) = requests_of(fake_llm, "submit_review")
    assert f"- {FINDING_LESSON}" in review.system_text


def test_failing_tests_and_remarks_are_not_lessons(fake_llm, project, owner) -> None:
    project.learn_distil = False
    project.save()
    remark = {
        "pass": False,
        "findings": [{"file": "app/api.py", "severity": "info", "message": "Consider a docstring"}],
    }
    run = awaiting(
        fake_llm,
        api_task(project),
        owner,
        ToolReply(input=PLAN),
        *coder_creates("app/api.py", "x = 1\n"),
        ToolReply(input=remark),
        *coder_replaces("app/api.py", "x = 1", "x = 2"),
        ToolReply(input=PASS),
    )
    assert not Memory.objects.filter(owner=owner, memory_type=LESSON_MEMORY_TYPE).exists()
    assert run.lessons == []


def test_the_distillation_call_is_costed_on_the_run(fake_llm, project, owner) -> None:
    run = with_changes_requested(
        fake_llm,
        passing_run(fake_llm, api_task(project), owner),
        owner,
        ToolReply(input={"lessons": [SNAKE_LESSON]}, input_tokens=900, output_tokens=40),
    )
    (call,) = AgentCall.objects.filter(run=run, agent="distiller")
    assert (call.input_tokens, call.output_tokens, call.outcome) == (900, 40, "ok")
    assert call.cost_usd > 0
    run.refresh_from_db()
    assert run.cost_usd == sum((c.cost_usd for c in AgentCall.objects.filter(run=run)), Decimal("0"))
    assert run.input_tokens == sum(AgentCall.objects.filter(run=run).values_list("input_tokens", flat=True))


def test_a_failed_distillation_keeps_the_feedback_as_written_and_the_run_goes_on(fake_llm, project, owner) -> None:
    run = with_changes_requested(
        fake_llm, passing_run(fake_llm, api_task(project), owner), owner, HttpError(400, "invalid_request_error")
    )
    (memory,) = Memory.objects.filter(owner=owner, memory_type=LESSON_MEMORY_TYPE)
    assert (memory.content, memory.source) == (FEEDBACK, "feedback")
    assert run.lessons[0]["distilled"] is False


def test_an_approval_reinforces_what_the_run_was_given_and_notes_what_it_taught(fake_llm, project, owner) -> None:
    run = with_changes_requested(
        fake_llm, passing_run(fake_llm, api_task(project), owner), owner, lessons_reply(SNAKE_LESSON)
    )
    run_approve(run=run, actor=owner)
    lesson = Memory.objects.get(owner=owner, memory_type=LESSON_MEMORY_TYPE)
    # The run's project's notes, referring to the lesson rather than copying it.
    note = AgentNote.objects.get(owner=owner, agent_id="coder", project=project)
    assert not AgentNote.objects.filter(owner=owner, project__isnull=True).exists()
    assert "## Updates" in note.content and f" · run {run.pk}\n" in note.content
    assert f"Run {run.number} of task #{run.task_id}" in note.content
    assert f"was approved.\n- Learned: [memory:{lesson.pk}]\n" in note.content
    assert SNAKE_LESSON not in note.content
    assert run.lessons[-1]["note"].endswith("It taught 1 lesson.")

    fake_llm.reset()
    second = passing_run(
        fake_llm, api_task(project, "customers"), owner, "app/customers.py", "fields = ['customer_id']\n"
    )
    memory = Memory.objects.get(owner=owner, memory_type=LESSON_MEMORY_TYPE)
    assert memory.reinforce_count == 0
    second = run_approve(run=second, actor=owner)
    memory.refresh_from_db()
    assert memory.reinforce_count == 1
    assert second.lessons[-1]["kind"] == "approval" and second.lessons[-1]["reinforced"] == [memory.pk]
    note.refresh_from_db()
    assert "It taught nothing new. Reinforced 1 memory it was given." in note.content


def test_a_lesson_a_person_deleted_is_not_recalled(fake_llm, project, owner, owner_client) -> None:
    with_changes_requested(
        fake_llm, passing_run(fake_llm, api_task(project), owner), owner, lessons_reply(SNAKE_LESSON)
    )
    memory = Memory.objects.get(owner=owner, memory_type=LESSON_MEMORY_TYPE)
    assert owner_client.delete(f"/api/memory/memories/{memory.pk}").status_code == 204
    fake_llm.reset()
    passing_run(fake_llm, api_task(project, "customers"), owner, "app/customers.py", "x = 1\n")
    assert all(SNAKE_LESSON not in request.system_text for request in fake_llm.requests)


def test_the_run_page_and_the_api_show_what_the_run_taught(
    fake_llm, project, owner, owner_client, other_client
) -> None:
    task = api_task(project)
    run = with_changes_requested(fake_llm, passing_run(fake_llm, task, owner), owner, lessons_reply(SNAKE_LESSON))
    body = owner_client.get(f"/api/runs/{run.pk}").json()
    assert [(entry["kind"], entry["distilled"]) for entry in body["lessons"]] == [("feedback", True)]
    assert body["lessons"][0]["memories"][0]["content"] == SNAKE_LESSON
    assert other_client.get(f"/api/runs/{run.pk}").status_code == 404

    owner_client.force_login(owner)
    page = owner_client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    start = page.index('data-testid="run-lessons"')
    section = page[start : page.index("</section>", start)]
    assert "From the request for changes" in section and "distilled by the model" in section
    assert SNAKE_LESSON in section and "for the Coder" in section
    assert f'href="{reverse("memory:recall")}?q=' in section


def test_the_next_runs_page_shows_the_lesson_its_coder_was_given_and_where_it_came_from(
    fake_llm, project, owner, owner_client
) -> None:
    project.learn_distil = False
    project.save()
    taught = with_changes_requested(fake_llm, passing_run(fake_llm, api_task(project), owner), owner)
    fake_llm.reset()
    task = api_task(project, "customers")
    run = passing_run(fake_llm, task, owner, "app/customers.py", "fields = ['customer_id']\n")
    coder = next(
        entry for entry in owner_client.get(f"/api/runs/{run.pk}").json()["recalled"] if entry["agent"] == "coder"
    )
    (given,) = coder["memories"]
    assert (given["content"], given["source"], given["source_run_id"]) == (FEEDBACK, "feedback", taught.pk)
    assert given["source_label"] == f"Feedback on run 1 of task #{taught.task_id}" and given["deleted"] is False

    owner_client.force_login(owner)
    page = owner_client.get(reverse("tasks:detail", args=[task.pk])).content.decode()
    start = page.index('data-testid="run-recalled"')
    section = page[start : page.index("</section>", start)]
    assert FEEDBACK in section
    lineage = reverse("pipelines:run-lineage", kwargs={"run_id": taught.pk})
    assert f'<a href="{lineage}">Feedback on run 1 of task #{taught.task_id}</a>' in section
    assert "request for changes" in section  # the source note

    # The Memory page names both runs as their pages do: by number within their task.
    page = owner_client.get(reverse("memory:recall")).content.decode()
    assert f"Feedback on run 1 of task #{taught.task_id}</a>" in page
    assert f">run 1 of task #{task.pk}</a> (coder)" in page

    # Deleted by a person afterwards: the page says so, the record of the call stays.
    Memory.objects.filter(pk=given["id"]).update(is_deleted=True)
    coder = next(
        entry for entry in owner_client.get(f"/api/runs/{run.pk}").json()["recalled"] if entry["agent"] == "coder"
    )
    assert coder["memories"][0]["deleted"] is True


def coder_notes(fake_llm) -> list[str]:
    """The notes part of each of the Coder's system prompts."""
    systems = [request.system_text for request in requests_of(fake_llm, EDITOR)]
    assert systems
    return [system[system.index(NOTES_HEADING) :] if NOTES_HEADING in system else "" for system in systems]


def approved_with_a_lesson(fake_llm, project, owner) -> Memory:
    """A run of ``project`` whose request for changes taught SNAKE_LESSON, approved."""
    run = with_changes_requested(
        fake_llm, passing_run(fake_llm, api_task(project), owner), owner, lessons_reply(SNAKE_LESSON)
    )
    run_approve(run=run, actor=owner)
    fake_llm.reset()
    return Memory.objects.get(owner=owner, memory_type=LESSON_MEMORY_TYPE)


def test_a_persons_global_note_reaches_every_project_a_projects_lesson_only_its_own(fake_llm, project, owner) -> None:
    notes_append(owner=owner, agent_id="coder", text="Hand-written: keep commits small.")
    approved_with_a_lesson(fake_llm, project, owner)

    passing_run(fake_llm, api_task(project, "customers"), owner, "app/customers.py", "x = 1\n")
    for notes in coder_notes(fake_llm):
        assert "Hand-written: keep commits small." in notes
        assert f"- Learned: “{SNAKE_LESSON}”" in notes

    fake_llm.reset()
    elsewhere = ProjectFactory(owner=owner)
    passing_run(fake_llm, api_task(elsewhere, "customers"), owner, "app/customers.py", "x = 1\n")
    for notes in coder_notes(fake_llm):
        assert "Hand-written: keep commits small." in notes
    assert all(SNAKE_LESSON not in request.system_text for request in fake_llm.requests)
    call = AgentCall.objects.filter(run__task__project=elsewhere, agent="coder").first()
    assert call is not None and call.recalled["notes"]["given"] == ["global"]


def test_a_lesson_deleted_after_its_approval_is_in_no_later_prompt(fake_llm, project, owner) -> None:
    lesson = approved_with_a_lesson(fake_llm, project, owner)
    memory_delete(owner=owner, memory_id=lesson.pk)

    passing_run(fake_llm, api_task(project, "customers"), owner, "app/customers.py", "x = 1\n")
    assert all(SNAKE_LESSON not in request.system_text for request in fake_llm.requests)
    # Its bullet went with it; the approval's own line stays.
    for notes in coder_notes(fake_llm):
        assert "was approved." in notes and "Learned" not in notes and "[memory:" not in notes


def test_a_lesson_edited_after_its_approval_is_given_in_its_new_wording_only(fake_llm, project, owner) -> None:
    lesson = approved_with_a_lesson(fake_llm, project, owner)
    reworded = "Name every API response field in snake_case, nested ones too."
    memory_update_content(owner=owner, memory_id=lesson.pk, content=reworded)

    passing_run(fake_llm, api_task(project, "customers"), owner, "app/customers.py", "x = 1\n")
    assert all(SNAKE_LESSON not in request.system_text for request in fake_llm.requests)
    for notes in coder_notes(fake_llm):
        assert f"- Learned: “{reworded}”" in notes


def test_the_distiller_writes_when_each_lesson_applies_and_it_is_embedded_with_it(fake_llm, project, owner) -> None:
    when = "adding or changing API endpoints or serializers"
    with_changes_requested(
        fake_llm,
        passing_run(fake_llm, api_task(project), owner),
        owner,
        ToolReply(input={"lessons": [{"lesson": SNAKE_LESSON, "applies_when": when}]}),
    )
    (distill,) = requests_of(fake_llm, "record_lessons")
    assert "applies_when" in distill.system_text
    (memory,) = Memory.objects.filter(owner=owner, memory_type=LESSON_MEMORY_TYPE)
    assert (memory.content, memory.applies_when) == (SNAKE_LESSON, when)
    assert vector_from_bytes(memory.embedding) == pytest.approx(
        embed_text(memory_embedding_text(SNAKE_LESSON, when)), abs=1e-5
    )


def test_a_distilled_lesson_cites_the_one_comment_on_its_file_or_the_whole_file_for_several() -> None:
    from memory.citations import citation_of_quote
    from pipelines.learning.lessons import LessonKind, Moment, distilled_citations

    first = citation_of_quote(path="a.py", start=3, end=3, quote="x = 1", commit="c" * 40)
    second = citation_of_quote(path="a.py", start=9, end=9, quote="y = 2", commit="c" * 40)
    only = citation_of_quote(path="b.py", start=1, end=1, quote="z = 3", commit="c" * 40)
    moment = Moment(
        key="k",
        kind=LessonKind.FEEDBACK,
        texts=["Tidy", "one (on a.py)", "two (on a.py)", "three (on b.py)"],
        agents=("coder",),
        source="feedback",
        decay_policy="reinforceable",
        cited=((), (first,), (second,), (only,)),
    )
    on_a, on_b, general = distilled_citations(moment, [("a.py",), ("./b.py",), ()])
    assert [(c.path, c.whole_file) for c in on_a] == [("a.py", True)]
    assert on_b == (only,)
    assert general == ()
