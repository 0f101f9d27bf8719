"""The project's Repository page. Included under /projects/."""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "repos"
urlpatterns = [
    path("<int:project_id>/repository", views.repository_page, name="page"),
    path("<int:project_id>/repository/link", views.repository_link_view, name="link"),
    path("<int:project_id>/repository/clone", views.repository_clone_view, name="clone"),
    path("<int:project_id>/repository/settings", views.repository_settings_view, name="settings"),
    path("<int:project_id>/repository/unlink", views.repository_unlink_view, name="unlink"),
]
