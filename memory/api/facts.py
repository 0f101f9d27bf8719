"""Facts and goals: list, add, edit, complete, delete; and the prompt memory context."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from accounts.selectors import request_user
from core.api import ApiView, SafeJSONParser, StrictCharField, error_responses
from core.exceptions import NotFound
from memory.models import Fact, Goal
from memory.models.facts import DEADLINE_MAX_LENGTH, FACT_MAX_LENGTH, GOAL_MAX_LENGTH
from memory.selectors.facts import (
    fact_get_for_user,
    fact_list,
    goal_get_for_user,
    goal_list,
    memory_prompt_context,
)
from memory.services.facts import (
    NO_MATCHING_GOAL,
    UNCHANGED,
    fact_create,
    fact_delete,
    fact_update,
    goal_complete,
    goal_complete_matching,
    goal_create,
    goal_delete,
    goal_update,
)
from projects.api.fields import OwnedProjectField
from projects.models import Project
from projects.selectors import project_get_for_user

STATUS_NOT_EDITABLE = "Complete a goal with POST /api/memory/goals/{id}/complete."
FACT_ID = OpenApiParameter("fact_id", int, OpenApiParameter.PATH, description="The fact's id.")
GOAL_ID = OpenApiParameter("goal_id", int, OpenApiParameter.PATH, description="The goal's id.")


# --- serializers -----------------------------------------------------------------------


class FactSerializer(serializers.ModelSerializer[Fact]):
    project = serializers.IntegerField(
        source="project_id", read_only=True, allow_null=True, help_text="The project's id, or null for all projects."
    )

    class Meta:
        model = Fact
        fields = ("id", "content", "project", "source", "created_at", "updated_at")
        read_only_fields = fields


class GoalSerializer(serializers.ModelSerializer[Goal]):
    project = serializers.IntegerField(
        source="project_id", read_only=True, allow_null=True, help_text="The project's id, or null for all projects."
    )

    class Meta:
        model = Goal
        fields = ("id", "text", "deadline", "status", "completed_at", "project", "source", "created_at", "updated_at")
        read_only_fields = fields


# Needs ``context={"user": ...}`` to resolve ``project`` among the user's own.
class _ProjectFieldMixin(serializers.Serializer):
    project = OwnedProjectField(
        required=False, allow_null=True, help_text="One of your projects, or null (the default) for all of them."
    )


class FactWriteSerializer(_ProjectFieldMixin):
    content = StrictCharField(max_length=FACT_MAX_LENGTH, help_text="What to remember.")


class GoalWriteSerializer(_ProjectFieldMixin):
    text = StrictCharField(max_length=GOAL_MAX_LENGTH, help_text="The goal.")
    deadline = StrictCharField(
        max_length=DEADLINE_MAX_LENGTH, required=False, allow_blank=True, help_text="Free text, e.g. `Friday`."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        refused = {field: [STATUS_NOT_EDITABLE] for field in ("status", "completed_at") if field in self.initial_data}
        if refused:
            raise serializers.ValidationError(refused)
        return attrs


class GoalListQuerySerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=Goal.Status.choices, required=False, help_text="Only these goals.")
    project = serializers.IntegerField(required=False, help_text="Only this project's goals (one of yours).")


class FactListQuerySerializer(serializers.Serializer):
    project = serializers.IntegerField(required=False, help_text="Only this project's facts (one of yours).")


class ContextQuerySerializer(serializers.Serializer):
    project = serializers.IntegerField(
        required=False, help_text="Your global memory plus this project's (one of yours); default: all of it."
    )


class GoalSearchSerializer(serializers.Serializer):
    search_text = StrictCharField(max_length=GOAL_MAX_LENGTH, help_text="Text the goal contains (any case).")
    project = serializers.IntegerField(
        required=False, help_text="Look among your global goals and this project's only (one of yours)."
    )


class ContextSerializer(serializers.Serializer):
    # The metaclass moves declared fields off the class, so this does not hide
    # Serializer.context at runtime; mypy only sees the class attribute.
    context = serializers.CharField(  # type: ignore[assignment]
        help_text="The `[Memory Context]` block; empty when there is nothing."
    )


def _project_filter(user: User, project_id: int | None) -> Project | None:
    return None if project_id is None else project_get_for_user(user=user, project_id=project_id)


def _updates(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "project": data.get("project", UNCHANGED)}


# --- views -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Records:
    """Facts or goals, as the list and detail endpoints below use them: one piece of
    code serves both, each through its own serializers, selectors and services."""

    serializer: type[serializers.Serializer]
    write_serializer: type[serializers.Serializer]
    list_query: type[serializers.Serializer]
    get_for_user: Callable[[User, str], Any]
    # (user, project, the list query's other filters)
    list: Callable[[User, Project | None, dict[str, Any]], QuerySet[Any]]
    create: Callable[..., Any]
    update: Callable[..., Any]
    delete: Callable[[Any], None]


FACTS = _Records(
    serializer=FactSerializer,
    write_serializer=FactWriteSerializer,
    list_query=FactListQuerySerializer,
    get_for_user=lambda user, fact_id: fact_get_for_user(user=user, fact_id=fact_id),
    list=lambda user, project, _filters: fact_list(user=user, project=project),
    create=fact_create,
    update=lambda fact, changes: fact_update(fact=fact, **changes),
    delete=lambda fact: fact_delete(fact=fact),
)
GOALS = _Records(
    serializer=GoalSerializer,
    write_serializer=GoalWriteSerializer,
    list_query=GoalListQuerySerializer,
    get_for_user=lambda user, goal_id: goal_get_for_user(user=user, goal_id=goal_id),
    list=lambda user, project, filters: goal_list(user=user, status=filters.get("status"), project=project),
    create=goal_create,
    update=lambda goal, changes: goal_update(goal=goal, **changes),
    delete=lambda goal: goal_delete(goal=goal),
)


# List and add facts or goals (``records``); each subclass is one endpoint, with its docs.
# (Comments, not docstrings, here and below: the schema would take a docstring for the
# description of the subclasses' operations.)
class _RecordListApi(GenericAPIView[Any]):
    records: ClassVar[_Records]
    parser_classes = [SafeJSONParser]
    filter_backends: list[Any] = []

    def get(self, request: Request) -> Response:
        user = request_user(request)
        query = self.records.list_query(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = dict(query.validated_data)
        rows = self.records.list(user, _project_filter(user, filters.pop("project", None)), filters)
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(self.records.serializer(page, many=True).data)

    def post(self, request: Request) -> Response:
        user = request_user(request)
        serializer = self.records.write_serializer(data=request.data, context={"user": user})
        serializer.is_valid(raise_exception=True)
        row = self.records.create(user=user, **serializer.validated_data)
        return Response(self.records.serializer(row).data, status=status.HTTP_201_CREATED)


# Edit and delete one fact or goal (``records``), named by the URL's one id.
class _RecordDetailApi(ApiView):
    records: ClassVar[_Records]

    def patch(self, request: Request, **path: str) -> Response:
        user = request_user(request)
        (row_id,) = path.values()
        row = self.records.get_for_user(user, row_id)
        serializer = self.records.write_serializer(data=request.data, partial=True, context={"user": user})
        serializer.is_valid(raise_exception=True)
        row = self.records.update(row, _updates(serializer.validated_data))
        return Response(self.records.serializer(row).data)

    def delete(self, request: Request, **path: str) -> Response:
        (row_id,) = path.values()
        self.records.delete(self.records.get_for_user(request_user(request), row_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(
    get=extend_schema(
        operation_id="memory_facts_list",
        summary="List your facts",
        description="Newest first. An unknown `project` is a 404.",
        parameters=[FactListQuerySerializer],
        responses={200: FactSerializer(many=True), **error_responses(400, 401, 404)},
    ),
    post=extend_schema(
        operation_id="memory_facts_create",
        summary="Remember a fact",
        request=FactWriteSerializer,
        responses={201: FactSerializer, **error_responses(400, 401, 403)},
    ),
)
class FactListApi(_RecordListApi):
    serializer_class = FactSerializer
    records = FACTS


@extend_schema_view(
    patch=extend_schema(
        operation_id="memory_facts_update",
        summary="Edit a fact",
        parameters=[FACT_ID],
        request=FactWriteSerializer(partial=True),
        responses={200: FactSerializer, **error_responses(400, 401, 403, 404)},
    ),
    delete=extend_schema(
        operation_id="memory_facts_destroy",
        summary="Forget a fact",
        parameters=[FACT_ID],
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(401, 403, 404)},
    ),
)
class FactDetailApi(_RecordDetailApi):
    records = FACTS


@extend_schema_view(
    get=extend_schema(
        operation_id="memory_goals_list",
        summary="List your goals",
        description="Newest first; completed goals by completion time. An unknown `project` is a 404.",
        parameters=[GoalListQuerySerializer],
        responses={200: GoalSerializer(many=True), **error_responses(400, 401, 404)},
    ),
    post=extend_schema(
        operation_id="memory_goals_create",
        summary="Set a goal",
        request=GoalWriteSerializer,
        responses={201: GoalSerializer, **error_responses(400, 401, 403)},
    ),
)
class GoalListApi(_RecordListApi):
    serializer_class = GoalSerializer
    records = GOALS


@extend_schema_view(
    patch=extend_schema(
        operation_id="memory_goals_update",
        summary="Edit a goal's text, deadline or project",
        description="`status` is refused: complete a goal with POST /api/memory/goals/{id}/complete.",
        parameters=[GOAL_ID],
        request=GoalWriteSerializer(partial=True),
        responses={200: GoalSerializer, **error_responses(400, 401, 403, 404)},
    ),
    delete=extend_schema(
        operation_id="memory_goals_destroy",
        summary="Delete a goal",
        parameters=[GOAL_ID],
        responses={204: OpenApiResponse(description="Deleted."), **error_responses(401, 403, 404)},
    ),
)
class GoalDetailApi(_RecordDetailApi):
    records = GOALS


class GoalCompleteApi(ApiView):
    @extend_schema(
        operation_id="memory_goals_complete",
        summary="Complete a goal",
        parameters=[GOAL_ID],
        request=None,
        responses={200: GoalSerializer, **error_responses(401, 403, 404, 409)},
    )
    def post(self, request: Request, goal_id: str) -> Response:
        goal = goal_complete(goal=goal_get_for_user(user=request_user(request), goal_id=goal_id))
        return Response(GoalSerializer(goal).data)


class GoalCompleteMatchingApi(ApiView):
    @extend_schema(
        operation_id="memory_goals_complete_matching",
        summary="Complete the first active goal containing a text",
        description="As `[DONE: search text]` does: the oldest active goal whose text contains "
        "`search_text`, ignoring case. None is a 404 `No matching goal found for: …`.",
        request=GoalSearchSerializer,
        responses={200: GoalSerializer, **error_responses(400, 401, 403, 404)},
    )
    def post(self, request: Request) -> Response:
        user = request_user(request)
        serializer = GoalSearchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        search_text = serializer.validated_data["search_text"]
        project = _project_filter(user, serializer.validated_data.get("project"))
        goal = goal_complete_matching(user=user, search_text=search_text, project=project)
        if goal is None:
            raise NotFound(NO_MATCHING_GOAL.format(" ".join(search_text.split())))
        return Response(GoalSerializer(goal).data)


class MemoryContextApi(ApiView):
    @extend_schema(
        operation_id="memory_context_retrieve",
        summary="The memory block agents get in their prompts",
        description="The 50 newest facts and 20 newest active goals. An unknown `project` is a 404.",
        parameters=[ContextQuerySerializer],
        responses={200: ContextSerializer, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        user = request_user(request)
        query = ContextQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        project = _project_filter(user, query.validated_data.get("project"))
        return Response({"context": memory_prompt_context(user=user, project=project)})
