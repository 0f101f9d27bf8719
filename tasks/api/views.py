"""Tasks: list with filters, create, edit, delete, and move between columns."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import request_user
from core.api import ApiView, SafeJSONParser, error_responses
from projects.selectors import project_get_default, project_get_for_user
from tasks.models import Task
from tasks.selectors import task_get_for_user, task_list
from tasks.services import task_create, task_delete, task_move, task_update

from .serializers import (
    TaskCreateSerializer,
    TaskListQuerySerializer,
    TaskMoveSerializer,
    TaskSerializer,
    TaskUpdateSerializer,
)

NO_PROJECT = "You have no project yet: create one first."
TASK_ID = OpenApiParameter("task_id", int, OpenApiParameter.PATH, description="The task's id.")


class TaskListApi(GenericAPIView[Task]):
    serializer_class = TaskSerializer
    parser_classes = [SafeJSONParser]
    # Filters are validated by TaskListQuerySerializer and applied by the selector.
    filter_backends: list[Any] = []

    @extend_schema(
        operation_id="tasks_list",
        summary="List your tasks",
        description="In board order: column, then position. An unknown `project` is a 404.",
        parameters=[TaskListQuerySerializer],
        responses={200: TaskSerializer(many=True), **error_responses(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        user = request_user(request)
        query = TaskListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = query.validated_data
        project_id = filters.get("project")
        project = None if project_id is None else project_get_for_user(user=user, project_id=project_id)
        tasks = task_list(
            user=user,
            project=project,
            status=filters.get("status"),
            category=filters.get("category"),
            q=filters.get("q"),
        )
        page = self.paginate_queryset(tasks)
        return self.get_paginated_response(TaskSerializer(page, many=True).data)

    @extend_schema(
        operation_id="tasks_create",
        summary="Create a task at the bottom of the backlog",
        request=TaskCreateSerializer,
        responses={201: TaskSerializer, **error_responses(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        user = request_user(request)
        serializer = TaskCreateSerializer(data=request.data, context={"user": user})
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        project = data.pop("project", None) or project_get_default(user=user)
        if project is None:
            raise serializers.ValidationError({"project": [NO_PROJECT]})
        task = task_create(project=project, actor=user, **data)
        return Response(TaskSerializer(task).data, status=status.HTTP_201_CREATED)


class TaskDetailApi(ApiView):
    @extend_schema(
        operation_id="tasks_retrieve",
        summary="A task",
        parameters=[TASK_ID],
        responses={200: TaskSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, task_id: str) -> Response:
        task = task_get_for_user(user=request_user(request), task_id=task_id)
        return Response(TaskSerializer(task).data)

    @extend_schema(
        operation_id="tasks_update",
        summary="Edit a task's title, description, category or priority",
        description="`status`, `position` and `project` are refused: move a task with PATCH /api/tasks/{id}/status.",
        parameters=[TASK_ID],
        request=TaskUpdateSerializer(partial=True),
        responses={200: TaskSerializer, **error_responses(400, 401, 403, 404)},
    )
    def patch(self, request: Request, task_id: str) -> Response:
        task = task_get_for_user(user=request_user(request), task_id=task_id)
        serializer = TaskUpdateSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        task = task_update(task=task, **serializer.validated_data)
        return Response(TaskSerializer(task).data)

    @extend_schema(
        operation_id="tasks_destroy",
        summary="Delete a task",
        parameters=[TASK_ID],
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, task_id: str) -> Response:
        task_delete(task=task_get_for_user(user=request_user(request), task_id=task_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class TaskStatusApi(ApiView):
    @extend_schema(
        operation_id="tasks_move",
        summary="Move a task to a column and position",
        description=(
            "Moves by hand follow the board's transition table. A refused move is a 400 with code "
            "`invalid_transition` and the allowed columns in `extra.allowed`."
        ),
        parameters=[TASK_ID],
        request=TaskMoveSerializer,
        responses={
            200: TaskSerializer,
            **error_responses(
                400,
                401,
                403,
                404,
                descriptions={400: "Invalid input, or a refused move (code `invalid_transition`, `extra.allowed`)."},
            ),
        },
    )
    def patch(self, request: Request, task_id: str) -> Response:
        user = request_user(request)
        task = task_get_for_user(user=user, task_id=task_id)
        serializer = TaskMoveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        task = task_move(task=task, actor=user, **serializer.validated_data)
        return Response(TaskSerializer(task).data)
