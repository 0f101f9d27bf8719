"""Loose ends of line comments: a request for changes of line comments alone (no
general feedback), and comments on lines the change removed (``side`` old), through
the API, the page and the Coder's prompt, with what the round did about them."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from pipelines.models import LineCommentAddressed, LineSide, PipelineRun, RunLineComment, RunStatus
from pipelines.review.services import LINE_NOT_REMOVED, line_comment_create, run_request_changes
from tests.api_helpers import field_errors
from tests.fake_anthropic import ToolReply, coder_replaces
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PASS = {"pass": True, "findings": []}
KEEP = "Keep the number: other modules read line_15 as an int"


def _comments_url(run: PipelineRun) -> str:
    return f"/api/runs/{run.pk}/line-comments"


def _no_distil(run: PipelineRun) -> None:
    run.task.project.learn_distil = False
    run.task.project.save()


def test_a_request_of_line_comments_alone_reaches_the_coder_and_teaches_their_lessons(
    fake_llm, awaiting_run, owner, owner_client
) -> None:
    created = owner_client.post(
        _comments_url(awaiting_run), {"path": "app/long.py", "line_start": 15, "body": "Use an Enum"}, format="json"
    )
    assert created.status_code == 201, created.json()
    fake_llm.script(
        ToolReply(
            input={
                "lessons": [
                    {"lesson": "Prefer enums to bare strings.", "applies_when": "naming", "files": ["app/long.py"]}
                ]
            }
        ),
        *coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = Number.FIFTEEN\n"),
        ToolReply(input=PASS),
    )
    # No feedback at all: the comment is the request.
    requested = owner_client.post(f"/api/runs/{awaiting_run.pk}/request-changes", {}, format="json")
    assert requested.status_code == 202, requested.json()
    assert requested.json()["feedback"] == ""
    run = drive_in_process(awaiting_run)
    assert run.status == RunStatus.AWAITING_APPROVAL

    distiller, coder = fake_llm.requests[-4], fake_llm.requests[-3]
    assert distiller.forced_tool == "record_lessons"
    assert "Use an Enum (on app/long.py) [about app/long.py]" in distiller.prompt_text
    prompt = coder.prompt_text
    assert "# Changes requested by the person reviewing" not in prompt  # only the comments
    comment = RunLineComment.objects.get()
    assert f"## app/long.py, line 15 (comment {comment.pk})" in prompt and "Comment: Use an Enum" in prompt
    assert comment.feedback_round == 1
    assert comment.addressed == LineCommentAddressed.CHANGED

    # Learned, and about the commented file (its citation kept per comment).
    feedback = next(entry for entry in run.lessons if entry["kind"] == "feedback")
    assert [memory["content"] for memory in feedback["memories"]] == ["Prefer enums to bare strings."]
    assert feedback["memories"][0]["about"][0].startswith("app/long.py")


def test_comments_alone_without_distilling_are_learned_as_written(fake_llm, awaiting_run, owner) -> None:
    _no_distil(awaiting_run)
    line_comment_create(run=awaiting_run, author=owner, path="app/long.py", line_start=14, line_end=15, body="Tidy")
    fake_llm.script(*coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 'XV'\n"), ToolReply(input=PASS))
    run = drive_in_process(run_request_changes(run=awaiting_run, feedback="", actor=owner))
    feedback = next(entry for entry in run.lessons if entry["kind"] == "feedback")
    assert [memory["content"] for memory in feedback["memories"]] == ["Tidy (on app/long.py)"]
    assert feedback["memories"][0]["about"][0].startswith("app/long.py")


def test_the_page_sends_comments_alone(fake_llm, awaiting_run, owner) -> None:
    _no_distil(awaiting_run)
    browser = Client()
    browser.force_login(owner)
    page_url = reverse("tasks:detail", args=[awaiting_run.task_id])
    html = browser.get(page_url).content.decode()
    textarea = html.split(f'id="feedback-{awaiting_run.pk}"', 1)[1].split(">", 1)[0]
    assert "required" in textarea  # nothing pending: say something
    line_comment_create(run=awaiting_run, author=owner, path="app/long.py", line_start=15, body="Name it")
    html = browser.get(page_url).content.decode()
    textarea = html.split(f'id="feedback-{awaiting_run.pk}"', 1)[1].split(">", 1)[0]
    assert "required" not in textarea

    fake_llm.script(*coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 'XV'\n"), ToolReply(input=PASS))
    answer = browser.post(reverse("pipelines:request_changes", args=[awaiting_run.pk]), {"feedback": ""})
    assert answer.status_code in (200, 302)
    run = drive_in_process(awaiting_run)
    assert run.status == RunStatus.AWAITING_APPROVAL
    assert RunLineComment.objects.get().feedback_round == 1


def test_a_comment_on_removed_lines_quotes_the_old_file_and_the_coder_reads_where(
    fake_llm, awaiting_run, owner, owner_client
) -> None:
    _no_distil(awaiting_run)
    # Line 15 of the old file ("line_15 = 15") was removed; line 14 is context, not removed.
    refused = owner_client.post(
        _comments_url(awaiting_run), {"path": "app/long.py", "line_start": 14, "side": "old", "body": KEEP}, "json"
    )
    assert field_errors(refused) == {"line_start": [LINE_NOT_REMOVED.format(line=14, path="app/long.py")]}
    bad_side = owner_client.post(
        _comments_url(awaiting_run), {"path": "app/long.py", "line_start": 15, "side": "left", "body": KEEP}, "json"
    )
    assert "side" in field_errors(bad_side)
    created = owner_client.post(
        _comments_url(awaiting_run), {"path": "app/long.py", "line_start": 15, "side": "old", "body": KEEP}, "json"
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["side"], body["lines"], body["quote"]) == ("old", "15", "line_15 = 15")
    comment = RunLineComment.objects.get()
    assert comment.lines_phrase == "removed line 15"

    fake_llm.script(*coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 15\n"), ToolReply(input=PASS))
    run = drive_in_process(run_request_changes(run=awaiting_run, feedback="", actor=owner))
    prompt = fake_llm.requests[-3].prompt_text
    assert f"## app/long.py, removed line 15 of the old file (comment {comment.pk})\n```\nline_15 = 15\n```" in prompt
    # The round put the line back: the removal it was about is no longer the same.
    comment.refresh_from_db()
    assert (comment.addressed, comment.judged_at_commit) == (LineCommentAddressed.CHANGED, run.head_commit)


def test_a_removal_left_as_it_was_is_not_changed(fake_llm, awaiting_run, owner) -> None:
    _no_distil(awaiting_run)
    comment = line_comment_create(
        run=awaiting_run, author=owner, path="app/long.py", line_start=15, side=LineSide.OLD, body=KEEP
    )
    # The round edits another line, far from the removed one.
    fake_llm.script(*coder_replaces("app/long.py", "line_3 = 3\n", "line_3 = 'three'\n"), ToolReply(input=PASS))
    run = drive_in_process(run_request_changes(run=awaiting_run, feedback="And line 3", actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL
    comment.refresh_from_db()
    assert comment.addressed == LineCommentAddressed.UNCHANGED
    assert comment.judged_at_commit == run.head_commit


def test_the_page_lets_you_comment_on_removed_lines(awaiting_run, owner) -> None:
    browser = Client()
    browser.force_login(owner)
    page_url = reverse("tasks:detail", args=[awaiting_run.task_id])
    html = browser.get(page_url).content.decode()
    assert 'data-old-line="15"' in html and 'data-old-line="14"' not in html  # removed rows only
    assert 'data-side="old"' in html and 'name="side"' in html
    create_url = reverse("pipelines:line_comment_create", args=[awaiting_run.pk])
    answer = browser.post(
        create_url, {"path": "app/long.py", "line_start": 15, "side": "old", "body": KEEP}, HTTP_HX_REQUEST="true"
    )
    assert answer.status_code == 200
    refreshed = answer.content.decode()
    assert "app/long.py, removed line 15" in refreshed
    # Shown under the removed row, not under the new line 15.
    removed_row = refreshed.split('data-old-line="15"', 1)[1]
    assert removed_row.split("</tr>", 1)[1].lstrip().startswith('<tr class="line-comment-row"')
    assert "app/long.py:15</code> (removed)" in refreshed
    comment = RunLineComment.objects.get()
    assert (comment.side, comment.quote) == (LineSide.OLD, "line_15 = 15")
