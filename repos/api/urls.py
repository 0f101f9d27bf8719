from __future__ import annotations

from django.urls import path

from . import environment, views

urlpatterns = [
    path("projects/<str:project_id>/repository", views.RepositoryApi.as_view(), name="project-repository"),
    path(
        "projects/<str:project_id>/repository/clone",
        views.RepositoryCloneApi.as_view(),
        name="project-repository-clone",
    ),
    path(
        "projects/<str:project_id>/repository/environment",
        environment.RepositoryEnvironmentApi.as_view(),
        name="project-repository-environment",
    ),
    path(
        "projects/<str:project_id>/repository/environment/rebuild",
        environment.RepositoryEnvironmentRebuildApi.as_view(),
        name="project-repository-environment-rebuild",
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
