"""The task page's pipeline actions and a run's lineage page (HTML). Included at the site root."""

from __future__ import annotations

from django.urls import path

from pipelines import views

app_name = "pipelines"
urlpatterns = [
    path("tasks/<id:task_id>/pipeline", views.pipeline_panel, name="panel"),
    path("tasks/<id:task_id>/pipeline/start", views.pipeline_start, name="start"),
    path("runs/<id:run_id>/cancel", views.run_cancel, name="cancel"),
    path("runs/<id:run_id>/retry", views.run_retry, name="retry"),
    path("runs/<id:run_id>/request-changes", views.run_request_changes, name="request_changes"),
    path("runs/<id:run_id>/line-comments", views.run_line_comment_create, name="line_comment_create"),
    path("runs/<id:run_id>/line-comments/<id:comment_id>/edit", views.run_line_comment_edit, name="line_comment_edit"),
    path(
        "runs/<id:run_id>/line-comments/<id:comment_id>/delete",
        views.run_line_comment_delete,
        name="line_comment_delete",
    ),
    path("runs/<id:run_id>/messages", views.run_message, name="message"),
    path("runs/<id:run_id>/approve", views.run_approve, name="approve"),
    path("runs/<id:run_id>/pull-request", views.run_open_pull_request_view, name="open_pull_request"),
    path(
        "runs/<id:run_id>/pull-request/merge-when-green",
        views.run_merge_when_green_view,
        name="merge_when_green",
    ),
    path("runs/<id:run_id>/patch", views.run_patch, name="patch"),
    path("runs/<id:run_id>/discard-branch", views.run_discard_branch, name="discard_branch"),
    # Under /memory/ since it shows what the agents remembered (the context store).
    path("memory/runs/<id:run_id>/lineage", views.run_lineage, name="run-lineage"),
]
