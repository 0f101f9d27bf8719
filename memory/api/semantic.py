"""Semantic memories: create (deduplicated), search by meaning, read, reinforce, delete."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import request_user
from core.api import ApiView, StrictCharField, error_responses
from memory.models.semantic import MEMORY_MAX_LENGTH, DecayPolicy, Memory
from memory.selectors.semantic import (
    SEARCH_LIMIT_MAX,
    MemorySearchResult,
    memory_confidence,
    memory_get_for_user,
    memory_search,
    memory_status,
)
from memory.services.semantic import memory_create, memory_delete, memory_reinforce
from projects.api.fields import OwnedProjectField

MEMORY_ID = OpenApiParameter("memory_id", int, OpenApiParameter.PATH, description="The memory's id.")
NOT_A_BOOLEAN = "Must be true or false."
SEARCH_QUERY_MAX_LENGTH = 2000


class StrictBooleanField(serializers.BooleanField):
    """JSON true/false only: no "yes", 1 or "on"."""

    default_error_messages = {"invalid": NOT_A_BOOLEAN}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class MemorySerializer(serializers.ModelSerializer[Memory]):
    project = serializers.IntegerField(source="project_id", read_only=True, allow_null=True, help_text="Project id.")
    confidence = serializers.SerializerMethodField(help_text="Current confidence, 0–1 (computed, never stored).")

    class Meta:
        model = Memory
        fields: tuple[str, ...] = (
            "id",
            "content",
            "memory_type",
            "decay_policy",
            "half_life_hours",
            "agent",
            "personality",
            "project",
            "is_global",
            "confidence",
            "reinforce_count",
            "created_at",
            "last_reinforced_at",
            "is_deleted",
            "deleted_at",
        )
        read_only_fields: tuple[str, ...] = fields

    def get_confidence(self, memory: Memory) -> float:
        return memory_confidence(memory=memory)


class MemoryCreatedSerializer(MemorySerializer):
    created = serializers.SerializerMethodField(
        help_text="False when the same text was already stored in this scope: that memory is returned (reinforced)."
    )

    class Meta(MemorySerializer.Meta):
        fields = (*MemorySerializer.Meta.fields, "created")
        read_only_fields = fields

    def get_created(self, memory: Memory) -> bool:
        return bool(self.context.get("created", True))


class MemoryCreateSerializer(serializers.Serializer):
    content = StrictCharField(max_length=MEMORY_MAX_LENGTH)
    memory_type = StrictCharField(max_length=50, required=False, default="note")
    decay_policy = serializers.ChoiceField(
        choices=DecayPolicy.choices, required=False, default=DecayPolicy.REINFORCEABLE
    )
    half_life_hours = serializers.FloatField(min_value=0.001, max_value=1_000_000, required=False)
    agent = StrictCharField(max_length=50, required=False, allow_blank=True, default="")
    personality = StrictCharField(max_length=50, required=False, allow_blank=True, default="")
    project = OwnedProjectField(required=False, allow_null=True, default=None, help_text="One of your projects.")
    is_global = StrictBooleanField(required=False, default=False)


class MemorySearchQuerySerializer(serializers.Serializer):
    q = serializers.CharField(max_length=SEARCH_QUERY_MAX_LENGTH, help_text="What to look for, in any words.")
    limit = serializers.IntegerField(min_value=1, max_value=SEARCH_LIMIT_MAX, default=10, required=False)
    min_confidence = serializers.FloatField(min_value=0.0, max_value=1.0, default=0.0, required=False)
    agent = serializers.CharField(max_length=50, required=False)
    personality = serializers.CharField(max_length=50, required=False)
    project = serializers.IntegerField(required=False, help_text="Only memories of this project.")
    type = serializers.CharField(max_length=50, required=False, help_text="Only memories of this type.")
    # A query-string boolean: "true"/"false" (also 1/0).
    is_global = serializers.BooleanField(
        required=False, allow_null=True, default=None, source="global_", help_text="Only global (or non-global) ones."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # "global" is a Python keyword: the field is declared under another name.
        self.fields["global"] = self.fields.pop("is_global")


class MemorySearchResultSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    content = serializers.CharField()
    similarity = serializers.FloatField(help_text="Cosine similarity to the query, -1–1.")
    confidence = serializers.FloatField(help_text="Current confidence, 0–1.")
    score = serializers.FloatField(help_text="similarity × confidence: the ranking key.")
    memory_type = serializers.CharField()
    decay_policy = serializers.ChoiceField(choices=DecayPolicy.choices)
    agent = serializers.CharField()
    personality = serializers.CharField()
    project = serializers.IntegerField(allow_null=True)
    is_global = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    last_reinforced_at = serializers.DateTimeField()


class MemorySearchResponseSerializer(serializers.Serializer):
    results = MemorySearchResultSerializer(many=True)


class MemoryStatusSerializer(serializers.Serializer):
    embedding_model = serializers.CharField()
    dimensions = serializers.IntegerField()
    memories = serializers.IntegerField(help_text="Your live memories.")
    deleted = serializers.IntegerField(help_text="Your soft-deleted memories.")
    index_size = serializers.IntegerField(help_text="Vectors in this process's search index (all users).")
    vector_store = serializers.CharField()


def search_result_data(result: MemorySearchResult) -> dict[str, Any]:
    memory = result.memory
    return {
        "id": memory.pk,
        "content": memory.content,
        "similarity": round(result.similarity, 6),
        "confidence": round(result.confidence, 6),
        "score": round(result.score, 6),
        "memory_type": memory.memory_type,
        "decay_policy": memory.decay_policy,
        "agent": memory.agent,
        "personality": memory.personality,
        "project": memory.project_id,
        "is_global": memory.is_global,
        "created_at": memory.created_at,
        "last_reinforced_at": memory.last_reinforced_at,
    }


class MemoryCreateApi(ApiView):
    @extend_schema(
        operation_id="memory_memories_create",
        summary="Store a semantic memory",
        description="Embedded offline. The same text (case and spacing aside) in the same scope is not stored "
        "twice: the existing memory is reinforced and returned with 200 and `created: false`.",
        request=MemoryCreateSerializer,
        responses={
            201: MemoryCreatedSerializer,
            200: OpenApiResponse(MemoryCreatedSerializer, description="Already stored: the existing memory."),
            **error_responses(400, 401, 403),
        },
    )
    def post(self, request: Request) -> Response:
        user = request_user(request)
        serializer = MemoryCreateSerializer(data=request.data, context={"user": user})
        serializer.is_valid(raise_exception=True)
        memory, created = memory_create(owner=user, **serializer.validated_data)
        body = MemoryCreatedSerializer(memory, context={"created": created}).data
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class MemorySearchApi(ApiView):
    @extend_schema(
        operation_id="memory_memories_search",
        summary="Search your memories by meaning",
        description="Ranked by similarity × confidence. Deleted memories are never returned; those under "
        "`min_confidence` are left out. Filters are exact.",
        parameters=[MemorySearchQuerySerializer],
        responses={200: MemorySearchResponseSerializer, **error_responses(400, 401)},
    )
    def get(self, request: Request) -> Response:
        user = request_user(request)
        query = MemorySearchQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        results = memory_search(
            user=user,
            query=data["q"],
            limit=data["limit"],
            min_confidence=data["min_confidence"],
            agent=data.get("agent"),
            personality=data.get("personality"),
            project_id=data.get("project"),
            memory_type=data.get("type"),
            is_global=data.get("global_"),
        )
        return Response({"results": [search_result_data(r) for r in results]})


class MemoryDetailApi(ApiView):
    @extend_schema(
        operation_id="memory_memories_retrieve",
        summary="One of your memories",
        parameters=[MEMORY_ID],
        responses={200: MemorySerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, memory_id: str) -> Response:
        memory = memory_get_for_user(user=request_user(request), memory_id=memory_id)
        return Response(MemorySerializer(memory).data)

    @extend_schema(
        operation_id="memory_memories_destroy",
        summary="Delete a memory (soft: never found by search again)",
        parameters=[MEMORY_ID],
        responses={204: None, **error_responses(401, 403, 404)},
    )
    def delete(self, request: Request, memory_id: str) -> Response:
        user = request_user(request)
        memory = memory_get_for_user(user=user, memory_id=memory_id)
        memory_delete(owner=user, memory_id=memory.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemoryReinforceApi(ApiView):
    @extend_schema(
        operation_id="memory_memories_reinforce",
        summary="Reinforce a memory: its confidence clock starts again",
        description="Permanent and deleted memories cannot be reinforced (400, `invalid_operation`).",
        request=None,
        parameters=[MEMORY_ID],
        responses={200: MemorySerializer, **error_responses(400, 401, 403, 404)},
    )
    def post(self, request: Request, memory_id: str) -> Response:
        user = request_user(request)
        memory = memory_get_for_user(user=user, memory_id=memory_id)
        memory = memory_reinforce(owner=user, memory_id=memory.pk)
        return Response(MemorySerializer(memory).data)


class MemoryStatusApi(ApiView):
    @extend_schema(
        operation_id="memory_memories_status",
        summary="The semantic memory store: model, dimensions, counts",
        responses={200: MemoryStatusSerializer, **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(memory_status(user=request_user(request)))
