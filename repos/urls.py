"""The project's Repository page. Included under /projects/."""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "repos"
urlpatterns = [
    path("<id:project_id>/repository", views.repository_page, name="page"),
    path("<id:project_id>/repository/link", views.repository_link_view, name="link"),
    path("<id:project_id>/repository/clone", views.repository_clone_view, name="clone"),
    path("<id:project_id>/repository/settings", views.repository_settings_view, name="settings"),
    path("<id:project_id>/repository/forge", views.repository_forge_view, name="forge"),
    path("<id:project_id>/repository/environment", views.repository_environment_view, name="environment"),
    path(
        "<id:project_id>/repository/environment/rebuild",
        views.repository_environment_rebuild_view,
        name="environment-rebuild",
    ),
    path("<id:project_id>/repository/unlink", views.repository_unlink_view, name="unlink"),
    path("<id:project_id>/repository/variables", views.repository_variable_set_view, name="variable-set"),
    path(
        "<id:project_id>/repository/variables/<str:name>/delete",
        views.repository_variable_delete_view,
        name="variable-delete",
    ),
]
