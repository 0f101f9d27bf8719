"""A repository's environment over the API: what is in force, the kept environments
with their setup output, the settings, and Rebuild."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import request_user
from core.api import ApiView, StrictCharField, error_responses

from ..environments.selectors import EnvironmentOverview, environment_overview
from ..environments.services.rebuild import environment_rebuild
from ..environments.services.settings import MAX_SETUP_SCRIPT, environment_settings_update
from ..models import PreparedEnvironment, Repository
from ..selectors import repository_get_for_user


class PreparedEnvironmentSerializer(serializers.ModelSerializer[PreparedEnvironment]):
    class Meta:
        model = PreparedEnvironment
        fields = [
            "id",
            "key",
            "status",
            "source",
            "base_commit",
            "image",
            "exit_code",
            "timed_out",
            "duration_ms",
            "size_bytes",
            "paths",
            "error",
            "output",
            "last_used_at",
            "finished_at",
            "updated_at",
        ]
        read_only_fields = fields


class EnvironmentSerializer(serializers.Serializer[Any]):
    setup_script = serializers.CharField(help_text="The script written on the Repository page (empty: none).")
    tests_network = serializers.BooleanField()
    in_force = serializers.DictField(
        allow_null=True, help_text="The script in force at the base branch's head: {source, label, script}."
    )
    key = serializers.CharField(help_text="The environment's key there (empty: nothing to prepare).")
    base_commit = serializers.CharField()
    current = PreparedEnvironmentSerializer(allow_null=True, help_text="The kept environment for that key, if any.")
    recent = PreparedEnvironmentSerializer(many=True)
    error = serializers.CharField()


class EnvironmentUpdateSerializer(serializers.Serializer[Any]):
    setup_script = StrictCharField(max_length=MAX_SETUP_SCRIPT, required=False, allow_blank=True, trim_whitespace=False)
    tests_network = serializers.BooleanField(required=False)


def _body(repository: Repository, overview: EnvironmentOverview) -> dict[str, Any]:
    script = overview.in_force
    return EnvironmentSerializer(
        {
            "setup_script": repository.setup_script,
            "tests_network": repository.tests_network,
            "in_force": {"source": script.source, "label": script.label, "script": script.text} if script else None,
            "key": overview.key,
            "base_commit": overview.base_commit,
            "current": overview.current,
            "recent": overview.recent,
            "error": overview.error,
        }
    ).data


class RepositoryEnvironmentApi(ApiView):
    @extend_schema(
        operation_id="projects_repository_environment_retrieve",
        summary="The repository's environment: the setup script in force, kept environments, setup output",
        responses={200: EnvironmentSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, project_id: str) -> Response:
        repository = repository_get_for_user(user=request_user(request), project_id=project_id)
        return Response(_body(repository, environment_overview(repository=repository)))

    @extend_schema(
        operation_id="projects_repository_environment_update",
        summary="Change the setup script or let the tests use the network",
        request=EnvironmentUpdateSerializer,
        responses={200: EnvironmentSerializer, **error_responses(400, 401, 404)},
    )
    def patch(self, request: Request, project_id: str) -> Response:
        repository = repository_get_for_user(user=request_user(request), project_id=project_id)
        body = EnvironmentUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        repository = environment_settings_update(repository=repository, **body.validated_data)
        return Response(_body(repository, environment_overview(repository=repository)))


class RepositoryEnvironmentRebuildApi(ApiView):
    @extend_schema(
        operation_id="projects_repository_environment_rebuild",
        summary="Prepare the environment of the base branch's head again, from scratch (in the background)",
        request=None,
        responses={202: EnvironmentSerializer, **error_responses(400, 401, 404)},
    )
    def post(self, request: Request, project_id: str) -> Response:
        repository = repository_get_for_user(user=request_user(request), project_id=project_id)
        environment_rebuild(repository=repository)
        return Response(_body(repository, environment_overview(repository=repository)), status=status.HTTP_202_ACCEPTED)
