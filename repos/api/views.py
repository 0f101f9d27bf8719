"""A project's linked repository over the API: read, link, clone, change, unlink; the
project's variables and secrets for its commands."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import request_user
from core.api import ApiView, error_responses
from projects.selectors import project_get_for_user

from ..models import Repository
from ..selectors import (
    repository_get_for_user,
    repository_state,
    repository_suggestion,
    repository_worktrees_disk_usage,
)
from ..services.ci import ci_settings_clean, repository_set_ci
from ..services.forge import repository_set_forge
from ..services.linking import repository_clone, repository_link, repository_unlink
from ..services.settings import repository_update
from ..variables import project_variable_delete, project_variable_set, project_variables_list
from .serializers import (
    ProjectVariableSerializer,
    ProjectVariableSetSerializer,
    RepositoryCloneSerializer,
    RepositoryForgeSerializer,
    RepositoryLinkSerializer,
    RepositorySerializer,
    RepositoryUpdateSerializer,
)


def _body(repository: Repository, request: Request | None = None) -> dict[str, Any]:
    repository.state = asdict(repository_state(repository=repository))  # type: ignore[attr-defined]
    repository.worktrees_bytes = repository_worktrees_disk_usage(repository=repository)  # type: ignore[attr-defined]
    suggestion = repository_suggestion(repository=repository)
    repository.suggested = asdict(suggestion) if suggestion else None  # type: ignore[attr-defined]
    return RepositorySerializer(repository, context={"request": request}).data


class RepositoryApi(ApiView):
    @extend_schema(
        operation_id="projects_repository_retrieve",
        summary="The project's linked repository and its state",
        responses={200: RepositorySerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, project_id: str) -> Response:
        return Response(_body(repository_get_for_user(user=request_user(request), project_id=project_id), request))

    @extend_schema(
        operation_id="projects_repository_link",
        summary="Link a git repository on the server (under REPOS_ROOT) to the project",
        request=RepositoryLinkSerializer,
        responses={200: RepositorySerializer, **error_responses(400, 401, 404)},
    )
    def put(self, request: Request, project_id: str) -> Response:
        project = project_get_for_user(user=request_user(request), project_id=project_id)
        body = RepositoryLinkSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(_body(repository_link(project=project, **body.validated_data)))

    @extend_schema(
        operation_id="projects_repository_update",
        summary="Change the base branch, merge strategy, test command or base image",
        request=RepositoryUpdateSerializer,
        responses={200: RepositorySerializer, **error_responses(400, 401, 404)},
    )
    def patch(self, request: Request, project_id: str) -> Response:
        repository = repository_get_for_user(user=request_user(request), project_id=project_id)
        body = RepositoryUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(_body(repository_update(repository=repository, **body.validated_data)))

    @extend_schema(
        operation_id="projects_repository_unlink",
        summary="Unlink the repository (its files and branches stay on disk)",
        responses={204: None, **error_responses(401, 404)},
    )
    def delete(self, request: Request, project_id: str) -> Response:
        repository_unlink(repository=repository_get_for_user(user=request_user(request), project_id=project_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class RepositoryCloneApi(ApiView):
    @extend_schema(
        operation_id="projects_repository_clone",
        summary="Clone a repository into REPOS_ROOT and link it (cloning runs in the background)",
        request=RepositoryCloneSerializer,
        responses={202: RepositorySerializer, **error_responses(400, 401, 404)},
    )
    def post(self, request: Request, project_id: str) -> Response:
        project = project_get_for_user(user=request_user(request), project_id=project_id)
        body = RepositoryCloneSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        repository = repository_clone(project=project, **body.validated_data)
        return Response(_body(repository), status=status.HTTP_202_ACCEPTED)


CI_FIELDS = ("ci_required_checks", "ci_fix_rounds_max", "merge_when_green")


class RepositoryForgeApi(ApiView):
    @extend_schema(
        operation_id="projects_repository_forge",
        summary="Set where run branches are pushed and the forge that opens their pull requests",
        request=RepositoryForgeSerializer,
        responses={200: RepositorySerializer, **error_responses(400, 401, 404)},
    )
    def put(self, request: Request, project_id: str) -> Response:
        user = request_user(request)
        repository = repository_get_for_user(user=user, project_id=project_id)
        body = RepositoryForgeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        given = dict(body.validated_data)
        ci = {name: given.pop(name) for name in CI_FIELDS if name in given}
        ci_settings_clean(**ci)  # before anything is saved
        repository = repository_set_forge(repository=repository, user=user, **given)
        return Response(_body(repository_set_ci(repository=repository, **ci), request))


class ProjectVariablesApi(ApiView):
    @extend_schema(
        operation_id="projects_repository_variables_list",
        summary="The project's variables for its test command (secret values are never returned)",
        responses={200: ProjectVariableSerializer(many=True), **error_responses(401, 404)},
    )
    def get(self, request: Request, project_id: str) -> Response:
        project = project_get_for_user(user=request_user(request), project_id=project_id)
        return Response(ProjectVariableSerializer(project_variables_list(project=project), many=True).data)

    @extend_schema(
        operation_id="projects_repository_variables_set",
        summary="Create or replace a variable (a secret is encrypted, masked in output, never shown again)",
        request=ProjectVariableSetSerializer,
        responses={200: ProjectVariableSerializer(many=True), **error_responses(400, 401, 404)},
    )
    def post(self, request: Request, project_id: str) -> Response:
        project = project_get_for_user(user=request_user(request), project_id=project_id)
        body = ProjectVariableSetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        project_variable_set(project=project, **body.validated_data)
        return Response(ProjectVariableSerializer(project_variables_list(project=project), many=True).data)


class ProjectVariableApi(ApiView):
    @extend_schema(
        operation_id="projects_repository_variables_delete",
        summary="Remove a variable",
        responses={204: None, **error_responses(401, 404)},
    )
    def delete(self, request: Request, project_id: str, name: str) -> Response:
        project = project_get_for_user(user=request_user(request), project_id=project_id)
        project_variable_delete(project=project, name=name)
        return Response(status=status.HTTP_204_NO_CONTENT)
