from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("projects/<str:project_id>/repository", views.RepositoryApi.as_view(), name="project-repository"),
    path(
        "projects/<str:project_id>/repository/clone",
        views.RepositoryCloneApi.as_view(),
        name="project-repository-clone",
    ),
    path(
        "projects/<str:project_id>/repository/forge",
        views.RepositoryForgeApi.as_view(),
        name="project-repository-forge",
    ),
    path(
        "projects/<str:project_id>/repository/variables",
        views.ProjectVariablesApi.as_view(),
        name="project-repository-variables",
    ),
    path(
        "projects/<str:project_id>/repository/variables/<str:name>",
        views.ProjectVariableApi.as_view(),
        name="project-repository-variable",
    ),
]
