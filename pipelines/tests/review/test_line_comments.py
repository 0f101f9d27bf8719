"""Comments on lines of a run's diff: collected while it awaits approval, sent to the
Coder with the next request for changes, shown in the review history with the round
that addressed them; through the API and the task page."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from pipelines.models import PipelineRun, RunLineComment, RunStatus
from pipelines.review.services import (
    ALREADY_SENT,
    BODY_TOO_LONG,
    FEEDBACK_REQUIRED,
    LINE_COMMENT_BODY_MAX_LENGTH,
    LINE_NOT_IN_DIFF,
    LINES_REVERSED,
    NOT_AWAITING_APPROVAL,
    PATH_NOT_IN_DIFF,
    line_comment_create,
    run_request_changes,
)
from pipelines.runs.services import StaleRun, run_cancel
from tests.api_helpers import field_errors
from tests.fake_anthropic import ToolReply, coder_replaces
from tests.workers import drive_in_process

pytestmark = pytest.mark.django_db

PASS = {"pass": True, "findings": []}
COMMENT = "Use an Enum here, not a bare string"


def _comments_url(run: PipelineRun) -> str:
    return f"/api/runs/{run.pk}/line-comments"


def _create(client, run: PipelineRun, **fields) -> object:
    return client.post(_comments_url(run), fields, format="json")


def test_line_comments_reach_the_coder_with_file_lines_and_quoted_code(fake_llm, awaiting_run, owner_client) -> None:
    created = _create(owner_client, awaiting_run, path="app/long.py", line_start=14, line_end=15, body=COMMENT)
    assert created.status_code == 201, created.json()
    assert created.json()["quote"] == "line_14 = 14\nline_15 = 'fifteen'"
    assert created.json()["pending"] is True

    # The request for changes: the lesson's distillation first, then the Coder, then the review.
    fake_llm.script(
        ToolReply(input={"lessons": ["Prefer enums to bare strings."]}),
        *coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = Number.FIFTEEN\n"),
        ToolReply(input=PASS),
    )
    requested = owner_client.post(
        f"/api/runs/{awaiting_run.pk}/request-changes", {"feedback": "Tidy it up"}, format="json"
    )
    assert requested.status_code == 202
    run = drive_in_process(awaiting_run)
    assert run.status == RunStatus.AWAITING_APPROVAL

    distiller, coder = fake_llm.requests[-4], fake_llm.requests[-3]
    assert distiller.forced_tool == "record_lessons"
    assert f"{COMMENT} (on app/long.py)" in distiller.prompt_text
    prompt = coder.prompt_text
    assert "# Changes requested by the person reviewing\nTidy it up" in prompt
    comment = RunLineComment.objects.get()
    heading = f"## app/long.py, lines 14–15 (comment {comment.pk})"
    assert heading + "\n```\nline_14 = 14\nline_15 = 'fifteen'\n```\nComment: " + COMMENT in prompt
    # It may say why it leaves a comment's lines as they are.
    assert "reply_to_comment" in coder.tool_names

    assert comment.feedback_round == 1
    assert comment.sent_at is not None
    assert run.lessons[0]["memories"][0]["content"] == "Prefer enums to bare strings."


def test_only_the_latest_rounds_comments_go_to_the_coder(fake_llm, awaiting_run, owner) -> None:
    awaiting_run.task.project.learn_distil = False
    awaiting_run.task.project.save()
    line_comment_create(run=awaiting_run, author=owner, path="app/long.py", line_start=15, body="First round note")
    fake_llm.script(*coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 'XV'\n"), ToolReply(input=PASS))
    run = drive_in_process(run_request_changes(run=awaiting_run, feedback="One", actor=owner))
    assert "First round note" in fake_llm.requests[-3].prompt_text

    line_comment_create(run=run, author=owner, path="app/long.py", line_start=15, body="Second round note")
    fake_llm.script(*coder_replaces("app/long.py", "line_15 = 'XV'\n", "line_15 = 15.0\n"), ToolReply(input=PASS))
    run = drive_in_process(run_request_changes(run=run, feedback="Two", actor=owner))
    prompt = fake_llm.requests[-3].prompt_text
    assert "Second round note" in prompt
    assert "First round note" not in prompt
    rounds = dict(RunLineComment.objects.values_list("body", "feedback_round"))
    assert rounds == {"First round note": 1, "Second round note": 2}


def test_api_create_list_edit_delete(awaiting_run, owner_client) -> None:
    one = _create(owner_client, awaiting_run, path="app/long.py", line_start=16, body="  Why 16?  ").json()
    assert (one["line_start"], one["line_end"], one["lines"], one["body"]) == (16, 16, "16", "Why 16?")
    assert one["author"] == "alice@example.com"
    _create(owner_client, awaiting_run, path="app/long.py", line_start=12, line_end=13, body="And these")

    listed = owner_client.get(_comments_url(awaiting_run)).json()
    assert [(c["lines"], c["pending"], c["feedback_round"]) for c in listed] == [
        ("12–13", True, None),
        ("16", True, None),
    ]

    detail = f"{_comments_url(awaiting_run)}/{one['id']}"
    edited = owner_client.patch(detail, {"body": "Why sixteen?"}, format="json")
    assert edited.status_code == 200
    assert RunLineComment.objects.get(pk=one["id"]).body == "Why sixteen?"
    assert owner_client.patch(detail, {"body": "  "}, format="json").status_code == 400
    assert owner_client.delete(detail).status_code == 204
    assert owner_client.delete(detail).status_code == 404
    assert [c["lines"] for c in owner_client.get(_comments_url(awaiting_run)).json()] == ["12–13"]

    # Sent with the request for changes: it can no longer change, and none can be added.
    owner_client.post(f"/api/runs/{awaiting_run.pk}/request-changes", {"feedback": "See comments"}, format="json")
    sent = owner_client.get(_comments_url(awaiting_run)).json()
    assert [(c["pending"], c["feedback_round"]) for c in sent] == [(False, 1)]
    sent_url = f"{_comments_url(awaiting_run)}/{sent[0]['id']}"
    refused = owner_client.patch(sent_url, {"body": "Changed my mind"}, format="json")
    assert refused.status_code == 409
    assert refused.json()["message"] in (ALREADY_SENT, NOT_AWAITING_APPROVAL)
    assert owner_client.delete(sent_url).status_code == 409
    late = _create(owner_client, awaiting_run, path="app/long.py", line_start=15, body="Late")
    assert late.status_code == 409
    assert late.json()["message"] == NOT_AWAITING_APPROVAL
    assert RunLineComment.objects.get().body == "And these"


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"path": "app/missing.py", "line_start": 15}, "path", PATH_NOT_IN_DIFF),
        ({"path": "app/calc.py", "line_start": 1}, "path", PATH_NOT_IN_DIFF),  # in the repository, not changed
        ({"path": "app/long.py", "line_start": 5}, "line_start", LINE_NOT_IN_DIFF.format(line=5, path="app/long.py")),
        (
            {"path": "app/long.py", "line_start": 17, "line_end": 25},
            "line_end",
            LINE_NOT_IN_DIFF.format(line=19, path="app/long.py"),
        ),
        ({"path": "app/long.py", "line_start": 21}, "line_start", LINE_NOT_IN_DIFF.format(line=21, path="app/long.py")),
        ({"path": "app/long.py", "line_start": 16, "line_end": 14}, "line_end", LINES_REVERSED),
        ({"path": "app/long.py", "line_start": 0}, "line_start", None),
        ({"path": "app/long.py", "line_start": "fifteen"}, "line_start", None),
        ({"path": "app/long.py", "line_start": 2**40}, "line_start", None),
        ({"path": 15, "line_start": 15}, "path", None),
        ({"path": "app/long.py", "line_start": 15, "body": "   "}, "body", None),
        ({"path": "app/long.py", "line_start": 15, "body": "x" * (LINE_COMMENT_BODY_MAX_LENGTH + 1)}, "body", None),
    ],
)
def test_api_refuses_bad_input_with_field_errors(awaiting_run, owner_client, fields, field, message) -> None:
    response = _create(owner_client, awaiting_run, **{"body": COMMENT, **fields})
    assert response.status_code == 400, response.json()
    errors = response.json()["extra"]["fields"]
    assert list(errors) == [field]
    if message:
        assert errors[field] == [message]
    assert not RunLineComment.objects.exists()


def test_a_refused_request_for_changes_sends_no_comment(awaiting_run, owner, owner_client) -> None:
    # Nothing said, no comment pending: nothing to request.
    refused = owner_client.post(f"/api/runs/{awaiting_run.pk}/request-changes", {"feedback": "  "}, format="json")
    assert refused.status_code == 400
    assert field_errors(refused) == {"feedback": [FEEDBACK_REQUIRED]}
    line_comment_create(run=awaiting_run, author=owner, path="app/long.py", line_start=15, body=COMMENT)
    assert RunLineComment.objects.get().feedback_round is None
    # The run was cancelled meanwhile (another tab): the compare-and-set fails, and the
    # comment is not stamped as sent to a Coder that never got it.
    run_cancel(run=PipelineRun.objects.get(pk=awaiting_run.pk), actor=owner)
    with pytest.raises(StaleRun):
        run_request_changes(run=awaiting_run, feedback="Too late", actor=owner)
    comment = RunLineComment.objects.get()
    assert (comment.feedback_round, comment.sent_at) == (None, None)


def test_a_body_too_long_for_the_service_is_a_field_error(awaiting_run, owner) -> None:
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as raised:
        line_comment_create(run=awaiting_run, author=owner, path="app/long.py", line_start=15, body="y" * 5_001)
    assert raised.value.message_dict == {"body": [BODY_TOO_LONG]}


def test_another_user_can_neither_see_nor_comment(awaiting_run, owner, owner_client, other_client, other_user) -> None:
    mine = line_comment_create(run=awaiting_run, author=owner, path="app/long.py", line_start=15, body=COMMENT)
    url = _comments_url(awaiting_run)
    assert other_client.get(url).status_code == 404
    assert _create(other_client, awaiting_run, path="app/long.py", line_start=15, body="Mine now").status_code == 404
    assert other_client.patch(f"{url}/{mine.pk}", {"body": "Hijacked"}, format="json").status_code == 404
    assert other_client.delete(f"{url}/{mine.pk}").status_code == 404
    # The pages too.
    browser = Client()
    browser.force_login(other_user)
    create_url = reverse("pipelines:line_comment_create", args=[awaiting_run.pk])
    form = {"path": "app/long.py", "line_start": 15, "body": "Mine now"}
    assert browser.post(create_url, form, HTTP_HX_REQUEST="true").status_code == 404
    edit_url = reverse("pipelines:line_comment_edit", args=[awaiting_run.pk, mine.pk])
    assert browser.post(edit_url, {"body": "Hijacked"}).status_code == 404
    delete_url = reverse("pipelines:line_comment_delete", args=[awaiting_run.pk, mine.pk])
    assert browser.post(delete_url).status_code == 404
    assert browser.get(reverse("tasks:detail", args=[awaiting_run.task_id])).status_code == 404
    assert list(RunLineComment.objects.values_list("body", flat=True)) == [COMMENT]
    # A comment id of another run is not found under this one.
    assert owner_client.delete(f"/api/runs/{awaiting_run.pk}/line-comments/{mine.pk + 1000}").status_code == 404


def test_listing_takes_a_fixed_number_of_queries(awaiting_run, owner, owner_client, django_assert_num_queries) -> None:
    # The token, the run with its task and project, the comments with their authors: as
    # many for three comments as for one. (A first request writes the token's last use.)
    line_comment_create(run=awaiting_run, author=owner, path="app/long.py", line_start=12, body="On 12")
    owner_client.get(_comments_url(awaiting_run))
    with django_assert_num_queries(3):
        assert len(owner_client.get(_comments_url(awaiting_run)).json()) == 1
    for line in (15, 18):
        line_comment_create(run=awaiting_run, author=owner, path="app/long.py", line_start=line, body=f"On {line}")
    with django_assert_num_queries(3):
        assert len(owner_client.get(_comments_url(awaiting_run)).json()) == 3


def test_the_page_renders_the_form_pending_comments_and_the_history(fake_llm, awaiting_run, owner) -> None:
    browser = Client()
    browser.force_login(owner)
    page_url = reverse("tasks:detail", args=[awaiting_run.task_id])
    html = browser.get(page_url).content.decode()
    create_url = reverse("pipelines:line_comment_create", args=[awaiting_run.pk])
    assert 'id="line-comment-form-template"' in html
    assert f'action="{create_url}"' in html
    assert 'data-new-line="15"' in html and 'data-new-line="11"' not in html
    assert "js/line_comments.js" in html

    # Added through the page's form, over htmx: the diff comes back with it under line 15.
    answer = browser.post(
        create_url, {"path": "app/long.py", "line_start": 14, "line_end": 15, "body": COMMENT}, HTTP_HX_REQUEST="true"
    )
    assert answer.status_code == 200
    refreshed = answer.content.decode()
    assert 'data-testid="line-comment"' in refreshed and COMMENT in refreshed
    assert "app/long.py, lines 14–15" in refreshed
    assert reverse("pipelines:line_comment_edit", args=[awaiting_run.pk, RunLineComment.objects.get().pk]) in refreshed
    assert 'data-testid="pending-line-comments"' in refreshed
    assert "Approve with 1 line comment not sent?" in refreshed  # approving would drop it: asked first
    # A bad one is refused with the reason in the panel, and nothing is written.
    refused = browser.post(create_url, {"path": "app/long.py", "line_start": 3, "body": "No"}, HTTP_HX_REQUEST="true")
    assert LINE_NOT_IN_DIFF.format(line=3, path="app/long.py") in refused.content.decode()
    assert RunLineComment.objects.count() == 1

    awaiting_run.task.project.learn_distil = False
    awaiting_run.task.project.save()
    fake_llm.script(*coder_replaces("app/long.py", "line_15 = 'fifteen'\n", "line_15 = 'XV'\n"), ToolReply(input=PASS))
    browser.post(reverse("pipelines:request_changes", args=[awaiting_run.pk]), {"feedback": "Tidy it"})
    drive_in_process(awaiting_run)

    html = browser.get(page_url).content.decode()
    history = html.split('data-testid="line-comment-history"', 1)[1].split("</section>", 1)[0]
    assert "Sent with request for changes 1" in history
    assert "Review 2 passed" in history  # the run's second review, the first after the request
    assert "app/long.py:14–15" in history and COMMENT in history
    assert "line_15 = &#x27;fifteen&#x27;" in history  # the code as it was, not as the Coder left it
    # Sent: no longer shown as pending in the diff.
    assert 'data-testid="line-comment"' not in html
