"""Pipeline runs over the API: start, read, diff, and the person's actions."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import request_user
from core.api import ApiView, error_responses
from core.exceptions import NotFound
from pipelines.api.serializers import (
    DiffSerializer,
    LineCommentCreateSerializer,
    LineCommentSerializer,
    LineCommentUpdateSerializer,
    PullRequestSerializer,
    RequestChangesSerializer,
    RunMessageCreateSerializer,
    RunMessageSerializer,
    RunSerializer,
)
from pipelines.messages.selectors import run_messages_for_run
from pipelines.messages.services import run_message_send
from pipelines.models import PipelineRun, PullRequest
from pipelines.pull_requests.merging import pull_request_merge_when_green
from pipelines.pull_requests.services import pull_request_for_user, run_open_pull_request
from pipelines.review.selectors import line_comment_get_for_run, line_comments_for_run, run_diff, run_patch
from pipelines.review.services import (
    line_comment_create,
    line_comment_delete,
    line_comment_update,
    run_approve,
    run_request_changes,
)
from pipelines.runs.selectors import run_get_for_user, run_list_for_task
from pipelines.runs.services import run_cancel, run_discard_branch, run_retry, run_start
from tasks.selectors import task_get_for_user

API_KEY_HEADER = "X-Anthropic-Key"
API_KEY_PARAMETER = OpenApiParameter(
    API_KEY_HEADER,
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="Your Anthropic API key for this run (kept encrypted, never logged). "
    "Without it the server's key is used.",
)


def _api_key(request: Request) -> str | None:
    return request.headers.get(API_KEY_HEADER) or None


class StartPipelineApi(ApiView):
    @extend_schema(
        operation_id="tasks_start_pipeline",
        summary="Start the agent pipeline on a task",
        request=None,
        parameters=[API_KEY_PARAMETER],
        responses={202: RunSerializer, **error_responses(400, 401, 404, 409, 503)},
    )
    def post(self, request: Request, task_id: str) -> Response:
        task = task_get_for_user(user=request_user(request), task_id=task_id)
        run = run_start(task=task, user=request_user(request), api_key=_api_key(request))
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class TaskRunListApi(GenericAPIView[PipelineRun]):
    serializer_class = RunSerializer
    queryset = PipelineRun.objects.none()  # for the schema; rows come from the selector

    @extend_schema(
        operation_id="tasks_runs_list",
        summary="A task's runs, newest first",
        responses={200: RunSerializer(many=True), **error_responses(401, 404)},
    )
    def get(self, request: Request, task_id: str) -> Response:
        task = task_get_for_user(user=request_user(request), task_id=task_id)
        page = self.paginate_queryset(run_list_for_task(task=task))
        return self.get_paginated_response(RunSerializer(page, many=True).data)


class RunDetailApi(ApiView):
    @extend_schema(
        operation_id="runs_retrieve", summary="A run", responses={200: RunSerializer, **error_responses(401, 404)}
    )
    def get(self, request: Request, run_id: str) -> Response:
        return Response(RunSerializer(run_get_for_user(user=request_user(request), run_id=run_id)).data)


class RunDiffApi(ApiView):
    @extend_schema(
        operation_id="runs_diff",
        summary="The run's file changes as unified diffs, a file tree and stats",
        responses={200: DiffSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        return Response(run_diff(run=run).as_dict())


class RunCancelApi(ApiView):
    @extend_schema(
        operation_id="runs_cancel",
        summary="Cancel an active run (a streaming call stops within a second)",
        request=None,
        responses={200: RunSerializer, **error_responses(400, 401, 404, 409)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        return Response(RunSerializer(run_cancel(run=run, actor=request_user(request))).data)


class RunRetryApi(ApiView):
    @extend_schema(
        operation_id="runs_retry",
        summary="Resume a paused run, or start a new run after a failed, cancelled or finished one",
        request=None,
        parameters=[API_KEY_PARAMETER],
        responses={202: RunSerializer, **error_responses(400, 401, 404, 409, 503)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        retried = run_retry(run=run, actor=request_user(request), api_key=_api_key(request))
        return Response(RunSerializer(retried).data, status=status.HTTP_202_ACCEPTED)


class RunRequestChangesApi(ApiView):
    @extend_schema(
        operation_id="runs_request_changes",
        summary="Send a run awaiting approval back to the Coder with feedback",
        description="The run's pending line comments go with the feedback (file, lines and the quoted code): "
        "they are stamped with this request's `feedback_round` and can no longer change. The feedback may be "
        "empty when there are pending line comments: they are the request.",
        request=RequestChangesSerializer,
        responses={202: RunSerializer, **error_responses(400, 401, 404, 409)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        body = RequestChangesSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        updated = run_request_changes(run=run, feedback=body.validated_data["feedback"], actor=request_user(request))
        return Response(RunSerializer(updated).data, status=status.HTTP_202_ACCEPTED)


class RunApproveApi(ApiView):
    @extend_schema(
        operation_id="runs_approve",
        summary="Approve a run awaiting approval; the task moves to done",
        description="On a linked repository the run's branch is merged into the base branch first. "
        "If the base moved on since the branch started, it is merged into the branch first and nothing is "
        "approved yet: 409 `base_moved` (with `extra.conflicts` when files conflicted) — a clean merge is tested "
        "and reviewed again, conflicts go to the Coder. If the branch still cannot merge (conflict markers left, "
        "a dirty checkout) the answer is 409 `merge_refused`, and the run stays awaiting approval with its branch.",
        request=None,
        responses={200: RunSerializer, **error_responses(400, 401, 404, 409)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        return Response(RunSerializer(run_approve(run=run, actor=request_user(request))).data)


NO_PATCH = "This run has no branch, so there is no patch."


def patch_response(run: PipelineRun) -> HttpResponse:
    """The run's branch as ``git format-patch`` text, as a download."""
    text = run_patch(run=run)
    if not text:
        raise NotFound(NO_PATCH)
    response = HttpResponse(text, content_type="text/x-patch; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="task-{run.task_id}-run-{run.number}.patch"'
    return response


class RunPatchApi(ApiView):
    @extend_schema(
        operation_id="runs_patch",
        summary="The run's branch as a patch (git format-patch), to apply with git am",
        responses={
            (200, "text/x-patch"): OpenApiResponse(OpenApiTypes.STR, description="mbox patch text"),
            **error_responses(401, 404),
        },
    )
    def get(self, request: Request, run_id: str) -> HttpResponse:
        return patch_response(run_get_for_user(user=request_user(request), run_id=run_id))


class RunDiscardBranchApi(ApiView):
    @extend_schema(
        operation_id="runs_discard_branch",
        summary="Delete a finished run's branch and worktree, merged or not",
        request=None,
        responses={200: RunSerializer, **error_responses(400, 401, 404)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        return Response(RunSerializer(run_discard_branch(run=run, actor=request_user(request))).data)


class RunPullRequestApi(ApiView):
    @extend_schema(
        operation_id="runs_pull_request_retrieve",
        summary="The run's pull request on the forge: its number, link and state",
        responses={200: PullRequestSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        return Response(PullRequestSerializer(pull_request_for_user(user=request_user(request), run_id=run.pk)).data)

    @extend_schema(
        operation_id="runs_pull_request_open",
        summary="Push the run's branch and open its pull request on the project's forge",
        description="Only a run awaiting approval, on a repository with a forge and a token set "
        "(`PUT /api/projects/{id}/repository/forge`). Opening again returns the open one. Merged on the forge, "
        "the run is approved and the task moves to done; closed unmerged, the run is cancelled and the task goes "
        "back. A refused push or forge is 400 `pull_request_failed` with `extra.reason` (push_failed, "
        "forge_token_refused, forge_forbidden, forge_not_found, forge_refused, …); an unreachable or failing "
        "forge is 503 with `extra.retryable` true. Nothing is lost: the run and its branch stay.",
        request=None,
        responses={201: PullRequestSerializer, 200: PullRequestSerializer, **error_responses(400, 401, 404, 409, 503)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        user = request_user(request)
        run = run_get_for_user(user=user, run_id=run_id)
        existed = PullRequest.objects.filter(run=run).exists()
        pull_request = run_open_pull_request(run=run, actor=user)
        return Response(
            PullRequestSerializer(pull_request).data, status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED
        )


class RunMergeWhenGreenApi(ApiView):
    @extend_schema(
        operation_id="runs_pull_request_merge_when_green",
        summary="Approve the run's pull request to be merged on the forge once all its checks pass",
        description="The repository must allow it (`merge_when_green` in `PUT /api/projects/{id}/repository/forge`) "
        "and the run must await approval with an open pull request (else 400 `invalid_transition`). Records who "
        "asked and when; if the checks of the pushed head already pass it is merged now, else when they do (by "
        "webhook or poll) — the forge's merge then approves the run and the task moves to done.",
        request=None,
        responses={200: PullRequestSerializer, **error_responses(400, 401, 404)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        user = request_user(request)
        run = run_get_for_user(user=user, run_id=run_id)
        return Response(PullRequestSerializer(pull_request_merge_when_green(run=run, actor=user)).data)


LINE_COMMENT_CLOSED = {409: "The run no longer awaits approval, or the comment was already sent to the Coder."}


class RunLineCommentListApi(ApiView):
    @extend_schema(
        operation_id="runs_line_comments_list",
        summary="The run's comments on lines of its diff, pending and sent, by file and line",
        responses={200: LineCommentSerializer(many=True), **error_responses(401, 404)},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        return Response(LineCommentSerializer(line_comments_for_run(run=run), many=True).data)

    @extend_schema(
        operation_id="runs_line_comments_create",
        summary="Comment on a line or a range of lines of a file in the diff of a run awaiting approval",
        description="Lines are numbered as in the new file and must all be shown by the diff (the file's "
        "changed hunks with their context). The lines are quoted with the comment. It stays pending "
        "(editable, deletable) until the next request for changes sends it to the Coder.",
        request=LineCommentCreateSerializer,
        responses={201: LineCommentSerializer, **error_responses(400, 401, 404, 409, descriptions=LINE_COMMENT_CLOSED)},
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        body = LineCommentCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        comment = line_comment_create(run=run, author=request_user(request), **body.validated_data)
        return Response(LineCommentSerializer(comment).data, status=status.HTTP_201_CREATED)


class RunLineCommentDetailApi(ApiView):
    @extend_schema(
        operation_id="runs_line_comments_update",
        summary="Change a pending line comment's text",
        request=LineCommentUpdateSerializer,
        responses={200: LineCommentSerializer, **error_responses(400, 401, 404, 409, descriptions=LINE_COMMENT_CLOSED)},
    )
    def patch(self, request: Request, run_id: str, comment_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        comment = line_comment_get_for_run(run=run, comment_id=comment_id)
        body = LineCommentUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(LineCommentSerializer(line_comment_update(comment=comment, **body.validated_data)).data)

    @extend_schema(
        operation_id="runs_line_comments_destroy",
        summary="Delete a pending line comment",
        responses={204: None, **error_responses(401, 404, 409, descriptions=LINE_COMMENT_CLOSED)},
    )
    def delete(self, request: Request, run_id: str, comment_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        line_comment_delete(comment=line_comment_get_for_run(run=run, comment_id=comment_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class RunMessageListApi(ApiView):
    @extend_schema(
        operation_id="runs_messages_list",
        summary="The messages sent to the run's agents, oldest first, read or waiting (each with its note)",
        responses={200: RunMessageSerializer(many=True), **error_responses(401, 404)},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        return Response(RunMessageSerializer(run_messages_for_run(run=run), many=True).data)

    @extend_schema(
        operation_id="runs_messages_create",
        summary="Send the run's agents a message",
        description="The agent at work reads it at its next turn (the Coder in its editing loop, the Planner or "
        "Reviewer at its next call); a run that is queued, paused or awaiting approval keeps it for its next "
        "round. The Claude CLI's Coder works as one call and reads messages as it starts, so one sent while it "
        "works waits for its next round (`delivered_at` null, said in `note`).",
        request=RunMessageCreateSerializer,
        responses={
            201: RunMessageSerializer,
            **error_responses(400, 401, 404, 409, descriptions={409: "The run has ended (code `run_ended`)."}),
        },
    )
    def post(self, request: Request, run_id: str) -> Response:
        run = run_get_for_user(user=request_user(request), run_id=run_id)
        body = RunMessageCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        message = run_message_send(run=run, author=request_user(request), **body.validated_data)
        return Response(RunMessageSerializer(message).data, status=status.HTTP_201_CREATED)
