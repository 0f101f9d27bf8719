"""Projects: the user's own, listed with their task counts."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from accounts.selectors import request_user
from core.api import ApiView, SafeJSONParser, error_responses
from projects.models import Project
from projects.selectors import project_get_for_user, project_list_for_user
from projects.services import project_create, project_delete, project_update

from .serializers import ProjectInputSerializer, ProjectSerializer

PROJECT_ID = OpenApiParameter("project_id", int, OpenApiParameter.PATH, description="The project's id.")


def _with_task_count(*, user: User, project: Project) -> Project:
    """The project as the list shows it, with its task count."""
    return project_list_for_user(user=user).get(pk=project.pk)


class ProjectListApi(GenericAPIView[Project]):
    serializer_class = ProjectSerializer
    parser_classes = [SafeJSONParser]
    # The list has no filters; django-filter's default backend has nothing to do here.
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[Project]:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user
            return Project.objects.none()
        return project_list_for_user(user=request_user(self.request))

    @extend_schema(
        operation_id="projects_list",
        summary="List your projects",
        responses={200: ProjectSerializer(many=True), **error_responses(401, 404)},
    )
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(ProjectSerializer(page, many=True).data)

    @extend_schema(
        operation_id="projects_create",
        summary="Create a project",
        request=ProjectInputSerializer,
        responses={201: ProjectSerializer, **error_responses(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        serializer = ProjectInputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = request_user(request)
        project = project_create(owner=user, **serializer.validated_data)
        return Response(
            ProjectSerializer(_with_task_count(user=user, project=project)).data, status=status.HTTP_201_CREATED
        )


class ProjectDetailApi(ApiView):
    @extend_schema(
        operation_id="projects_retrieve",
        summary="A project",
        parameters=[PROJECT_ID],
        responses={200: ProjectSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, project_id: str) -> Response:
        user = request_user(request)
        project = project_get_for_user(user=user, project_id=project_id)
        return Response(ProjectSerializer(_with_task_count(user=user, project=project)).data)

    @extend_schema(
        operation_id="projects_update",
        summary="Rename a project or change its description",
        parameters=[PROJECT_ID],
        request=ProjectInputSerializer(partial=True),
        responses={200: ProjectSerializer, **error_responses(400, 401, 403, 404)},
    )
    def patch(self, request: Request, project_id: str) -> Response:
        user = request_user(request)
        project = project_get_for_user(user=user, project_id=project_id)
        serializer = ProjectInputSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        project = project_update(project=project, **serializer.validated_data)
        return Response(ProjectSerializer(_with_task_count(user=user, project=project)).data)

    @extend_schema(
        operation_id="projects_destroy",
        summary="Delete a project and its tasks",
        parameters=[PROJECT_ID],
        responses={
            204: OpenApiResponse(description="Deleted."),
            **error_responses(400, 401, 403, 404, descriptions={400: "It is your last project (code `last_project`)."}),
        },
    )
    def delete(self, request: Request, project_id: str) -> Response:
        project = project_get_for_user(user=request_user(request), project_id=project_id)
        project_delete(project=project)
        return Response(status=status.HTTP_204_NO_CONTENT)
