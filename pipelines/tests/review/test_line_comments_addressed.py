"""What the Coder's round did about each line comment it was sent: read from git once
the round committed — its lines changed, or left as they were (and whether the Coder
said why) — on the comment, the task page and the API; never "addressed" because a
review followed."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from pipelines.agents.replies import REPLY_KEPT, UNKNOWN_COMMENT
from pipelines.models import LineCommentAddressed, PipelineRun, RunLineComment, RunStatus
from pipelines.review.services import line_comment_create, run_request_changes
from tests.fake_anthropic import TextReply, ToolReply, coder_replaces
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PASS = {"pass": True, "findings": []}
FAIL = {"pass": False, "findings": [{"file": "app/long.py", "line": 12, "severity": "major", "message": "Name 12"}]}
REPLY = "Twelve is the number the spec uses; it stays."


@pytest.fixture
def awaiting(awaiting_run: PipelineRun) -> PipelineRun:
    """The run awaiting approval, its requests for changes teaching no lesson (one
    model call fewer to script)."""
    awaiting_run.task.project.learn_distil = False
    awaiting_run.task.project.save()
    return awaiting_run


def _comment(run: PipelineRun, owner, line_start: int, line_end: int, body: str) -> RunLineComment:
    return line_comment_create(
        run=run, author=owner, path="app/long.py", line_start=line_start, line_end=line_end, body=body
    )


def _history(owner, run: PipelineRun) -> str:
    browser = Client()
    browser.force_login(owner)
    html = browser.get(reverse("tasks:detail", args=[run.task_id])).content.decode()
    return html.split('data-testid="line-comment-history"', 1)[1].split("</section>", 1)[0]


def _item(history: str, where: str) -> str:
    """The history's entry of the comment on ``where`` ("app/long.py:15")."""
    return history.split(f'<p class="finding-where">{where}</p>', 1)[1].split("</li>", 1)[0]


def test_a_comment_whose_lines_the_round_edited_is_changed_and_one_left_alone_is_not(
    fake_llm, awaiting, owner, owner_client
) -> None:
    made_on = awaiting.head_commit
    edited = _comment(awaiting, owner, 14, 15, "Spell fifteen as a number")
    # Right below the edited line: the round inserts nothing there and edits neither.
    untouched = _comment(awaiting, owner, 16, 17, "Sixteen and seventeen too")
    assert edited.made_on_commit == made_on

    fake_llm.script(*coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 15.0\n"), ToolReply(input=PASS))
    run = drive_in_process(run_request_changes(run=awaiting, feedback="Numbers, please", actor=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL and run.head_commit != made_on

    edited.refresh_from_db()
    untouched.refresh_from_db()
    assert (edited.addressed, edited.judged_at_commit) == (LineCommentAddressed.CHANGED, run.head_commit)
    assert (untouched.addressed, untouched.reply) == (LineCommentAddressed.UNCHANGED, "")
    assert untouched.judged_at_commit == run.head_commit

    history = _history(owner, run)
    assert "Changed in round 1" in _item(history, "app/long.py:14–15")
    assert "Not changed in round 1" in _item(history, "app/long.py:16–17")
    assert 'data-addressed="unchanged"' in _item(history, "app/long.py:16–17")
    # A review followed the round; that says nothing about the comments.
    assert "addressed" not in history.replace("data-addressed", "").replace("line-comment-addressed", "")
    assert "Review 2 passed" in history

    listed = {c["lines"]: c for c in owner_client.get(f"/api/runs/{run.pk}/line-comments").json()}
    assert listed["14–15"]["addressed"] == "changed" and listed["16–17"]["addressed"] == "unchanged"
    assert listed["16–17"]["made_on_commit"] == made_on
    assert listed["16–17"]["judged_at_commit"] == run.head_commit


def test_a_coder_reply_explains_a_comment_whose_lines_it_left(fake_llm, awaiting, owner, owner_client) -> None:
    asked = _comment(awaiting, owner, 12, 12, "Why twelve?")
    fake_llm.script(
        # A reply to a comment it was not sent is refused, and it tries again.
        ToolReply(name="reply_to_comment", input={"comment": asked.pk + 1000, "reply": REPLY}),
        ToolReply(name="reply_to_comment", input={"comment": asked.pk, "reply": f"  {REPLY}\n"}),
        *coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 15\n"),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_request_changes(run=awaiting, feedback="See my question", actor=owner))

    coder = fake_llm.requests[-2]  # its last turn, with every tool result before it
    assert UNKNOWN_COMMENT.format(comment=asked.pk + 1000, comments=asked.pk) in coder.prompt_text
    assert REPLY_KEPT.format(comment=asked.pk) in coder.prompt_text
    asked.refresh_from_db()
    assert (asked.addressed, asked.reply) == (LineCommentAddressed.EXPLAINED, REPLY)

    item = _item(_history(owner, run), "app/long.py:12")
    assert "Not changed — the Coder says: <q>Twelve is the number the spec uses; it stays.</q>" in item
    listed = owner_client.get(f"/api/runs/{run.pk}/line-comments").json()
    assert (listed[0]["addressed"], listed[0]["reply"]) == ("explained", REPLY)


def test_a_comment_on_a_file_the_round_removed_is_changed(fake_llm, awaiting, owner) -> None:
    removed = _comment(awaiting, owner, 18, 18, "Do we need this file at all?")
    fake_llm.script(
        ToolReply(name="delete_file", input={"path": "app/long.py"}), TextReply("Removed it."), ToolReply(input=PASS)
    )
    run = drive_in_process(run_request_changes(run=awaiting, feedback="Drop it if unused", actor=owner))

    removed.refresh_from_db()
    assert removed.addressed == LineCommentAddressed.CHANGED
    assert "Changed in round 1" in _item(_history(owner, run), "app/long.py:18")


def test_a_fix_round_after_the_request_is_judged_again_from_the_comments_commit(fake_llm, awaiting, owner) -> None:
    later = _comment(awaiting, owner, 12, 12, "Name twelve")
    fake_llm.script(
        # The request's round leaves line 12; its review fails; the fix round edits it.
        *coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 15\n"),
        ToolReply(input=FAIL),
        *coder_replaces("app/long.py", "line_12 = 12\n", "TWELVE = 12\n"),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_request_changes(run=awaiting, feedback="Names", actor=owner))

    later.refresh_from_db()
    assert (later.addressed, later.judged_at_commit) == (LineCommentAddressed.CHANGED, run.head_commit)
    coder_prompts = [request.prompt_text for request in fake_llm.requests if "Name twelve" in request.prompt_text]
    assert len(coder_prompts) >= 2  # the fix round was sent the comment again


def test_a_comment_sent_before_rounds_were_checked_is_not_said_to_be_addressed(fake_llm, awaiting, owner) -> None:
    made_on = awaiting.head_commit
    old = _comment(awaiting, owner, 15, 15, "Written before the check")
    RunLineComment.objects.filter(pk=old.pk).update(made_on_commit="")  # as the migration leaves them
    fake_llm.script(*coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 15\n"), ToolReply(input=PASS))
    # Still pending at the request: stamped with the commit its lines were read at.
    run = drive_in_process(run_request_changes(run=awaiting, feedback="Go", actor=owner))
    old.refresh_from_db()
    assert old.made_on_commit == made_on and old.addressed == LineCommentAddressed.CHANGED

    # One sent before the check existed: nothing checked it, and the page says so.
    RunLineComment.objects.filter(pk=old.pk).update(made_on_commit="", addressed="", judged_at_commit="")
    item = _item(_history(owner, run), "app/long.py:15")
    assert "Not checked against the round&#x27;s changes" in item
    assert "Changed" not in item
