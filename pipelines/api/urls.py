from __future__ import annotations

from django.urls import path

from pipelines.api import events, views, webhooks

urlpatterns = [
    path("tasks/<str:task_id>/start-pipeline", views.StartPipelineApi.as_view(), name="task-start-pipeline"),
    path("tasks/<str:task_id>/runs", views.TaskRunListApi.as_view(), name="task-runs"),
    path("tasks/<str:task_id>/events", events.TaskEventsApi.as_view(), name="task-events"),
    path("runs/<str:run_id>", views.RunDetailApi.as_view(), name="run-detail"),
    path("runs/<str:run_id>/diff", views.RunDiffApi.as_view(), name="run-diff"),
    path("runs/<str:run_id>/cancel", views.RunCancelApi.as_view(), name="run-cancel"),
    path("runs/<str:run_id>/retry", views.RunRetryApi.as_view(), name="run-retry"),
    path("runs/<str:run_id>/request-changes", views.RunRequestChangesApi.as_view(), name="run-request-changes"),
    path("runs/<str:run_id>/approve", views.RunApproveApi.as_view(), name="run-approve"),
    path("runs/<str:run_id>/line-comments", views.RunLineCommentListApi.as_view(), name="run-line-comments"),
    path(
        "runs/<str:run_id>/line-comments/<str:comment_id>",
        views.RunLineCommentDetailApi.as_view(),
        name="run-line-comment",
    ),
    path("runs/<str:run_id>/messages", views.RunMessageListApi.as_view(), name="run-messages"),
    path("runs/<str:run_id>/patch", views.RunPatchApi.as_view(), name="run-patch"),
    path("runs/<str:run_id>/discard-branch", views.RunDiscardBranchApi.as_view(), name="run-discard-branch"),
    path("runs/<str:run_id>/pull-request", views.RunPullRequestApi.as_view(), name="run-pull-request"),
    path(
        "runs/<str:run_id>/pull-request/merge-when-green",
        views.RunMergeWhenGreenApi.as_view(),
        name="run-pull-request-merge-when-green",
    ),
    path("forges/webhooks/<str:repository_id>", webhooks.forge_webhook, name="forge-webhook"),
]
