"""Semantic memories: list, create (deduplicated, near-duplicates consolidated), search by
meaning, read, edit, pin, reinforce, delete."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
    extend_schema_view,
)
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import request_user
from core.api import ApiView, SafeJSONParser, StrictBooleanField, StrictCharField, error_responses
from core.converters import MAX_ID
from memory.models.semantic import MEMORY_MAX_LENGTH, DecayPolicy, Memory, MemorySource
from memory.selectors.semantic import (
    SEARCH_LIMIT_MAX,
    MemorySearchResult,
    MemoryUses,
    memory_confidence,
    memory_fades_at,
    memory_get_for_user,
    memory_list_for_user,
    memory_search,
    memory_status,
    memory_uses_for,
    memory_uses_get,
)
from memory.services.semantic import (
    memory_create,
    memory_delete,
    memory_pin,
    memory_reinforce,
    memory_update_content,
)
from projects.api.fields import OwnedProjectField
from projects.selectors import project_get_for_user

MEMORY_ID = OpenApiParameter("memory_id", int, OpenApiParameter.PATH, description="The memory's id.")
SEARCH_QUERY_MAX_LENGTH = 2000


class MemoryUseSerializer(serializers.Serializer):
    run_id = serializers.IntegerField(help_text="The pipeline run that was given the memory.")
    agent = serializers.CharField(help_text="The agent of that run it was given to.")
    used_at = serializers.DateTimeField()


class MemorySerializer(serializers.ModelSerializer[Memory]):
    """Needs nothing in its context; a list passes ``uses`` (memory id → MemoryUses) so
    that its rows cost no query each."""

    project = serializers.IntegerField(source="project_id", read_only=True, allow_null=True, help_text="Project id.")
    confidence = serializers.SerializerMethodField(help_text="Current confidence, 0–1 (computed, never stored).")
    fades_at = serializers.SerializerMethodField(
        help_text="When its confidence reaches 0 and it is no longer listed (unless reinforced); null if pinned."
    )
    pinned = serializers.SerializerMethodField(help_text="Permanent: it never fades.")
    use_count = serializers.SerializerMethodField(help_text="How many times runs were given this memory.")
    latest_uses = serializers.SerializerMethodField(help_text="The latest few of those, newest first.")

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
            "source",
            "source_run_id",
            "source_note",
            "confidence",
            "fades_at",
            "pinned",
            "reinforce_count",
            "use_count",
            "latest_uses",
            "created_at",
            "last_reinforced_at",
            "is_deleted",
            "deleted_at",
        )
        read_only_fields: tuple[str, ...] = fields

    def get_confidence(self, memory: Memory) -> float:
        return memory_confidence(memory=memory)

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_fades_at(self, memory: Memory) -> str | None:
        moment = memory_fades_at(memory=memory)
        return None if moment is None else serializers.DateTimeField().to_representation(moment)

    def get_pinned(self, memory: Memory) -> bool:
        return memory.decay_policy == DecayPolicy.PERMANENT

    def _uses(self, memory: Memory) -> MemoryUses:
        uses: dict[int, MemoryUses] | None = self.context.get("uses")
        if uses is not None and memory.pk in uses:
            return uses[memory.pk]
        return memory_uses_get(memory=memory)

    def get_use_count(self, memory: Memory) -> int:
        return self._uses(memory).count

    @extend_schema_field(MemoryUseSerializer(many=True))
    def get_latest_uses(self, memory: Memory) -> list[dict[str, Any]]:
        return MemoryUseSerializer(self._uses(memory).latest, many=True).data  # type: ignore[return-value]


class MemoryCreatedSerializer(MemorySerializer):
    created = serializers.SerializerMethodField(
        help_text="False when the memory was already stored in this scope: that memory is returned (reinforced)."
    )
    consolidated = serializers.SerializerMethodField(
        help_text="True when the text was not the same but close in meaning to that memory "
        "(MEMORY_CONSOLIDATE_SIMILARITY): it keeps the longer of the two wordings."
    )

    class Meta(MemorySerializer.Meta):
        fields = (*MemorySerializer.Meta.fields, "created", "consolidated")
        read_only_fields = fields

    def get_created(self, memory: Memory) -> bool:
        return bool(self.context.get("created", True))

    def get_consolidated(self, memory: Memory) -> bool:
        return bool(self.context.get("consolidated", False))


class MemoryListQuerySerializer(serializers.Serializer):
    project = serializers.IntegerField(required=False, help_text="Only this project's memories (one of yours).")
    agent = serializers.CharField(max_length=50, required=False, help_text="Only this agent's memories.")
    source = serializers.ChoiceField(  # type: ignore[assignment]  # a field named "source"
        choices=MemorySource.choices, required=False, help_text="Only from this source."
    )
    q = serializers.CharField(max_length=SEARCH_QUERY_MAX_LENGTH, required=False, help_text="Text contained, any case.")
    include_faded = serializers.BooleanField(
        required=False, default=False, help_text="Also the memories whose confidence has reached 0."
    )


class MemoryEditSerializer(serializers.Serializer):
    content = StrictCharField(max_length=MEMORY_MAX_LENGTH, help_text="The new text; it is embedded again.")


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
    project = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_ID, help_text="Only memories of this project."
    )
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
    index_size = serializers.IntegerField(help_text="Your live memories of the current embedding model.")
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


class MemoryListCreateApi(GenericAPIView[Memory]):
    serializer_class = MemorySerializer
    parser_classes = [SafeJSONParser]
    filter_backends: list[Any] = []

    @extend_schema(
        operation_id="memory_memories_list",
        summary="List your memories",
        description="Newest first, paginated; deleted ones never, faded ones (confidence 0) only with "
        "`include_faded=true`. An unknown `project` is a 404.",
        parameters=[MemoryListQuerySerializer],
        responses={200: MemorySerializer(many=True), **error_responses(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        user = request_user(request)
        query = MemoryListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        filters = query.validated_data
        project_id = filters.get("project")
        memories = memory_list_for_user(
            user=user,
            project=None if project_id is None else project_get_for_user(user=user, project_id=project_id),
            agent=filters.get("agent"),
            source=filters.get("source"),
            q=filters.get("q"),
            include_faded=filters["include_faded"],
        )
        page = self.paginate_queryset(memories) or []
        uses = memory_uses_for(memory_ids=[memory.pk for memory in page])
        return self.get_paginated_response(MemorySerializer(page, many=True, context={"uses": uses}).data)

    @extend_schema(
        operation_id="memory_memories_create",
        summary="Store a semantic memory",
        description="Embedded offline. A memory is not stored twice in the same scope (owner, agent, "
        "personality, project, global): the same text (case and spacing aside) reinforces the existing "
        "memory, answered with 200 and `created: false`; so does a text close in meaning to a live one "
        "(cosine similarity ≥ MEMORY_CONSOLIDATE_SIMILARITY, default 0.90), answered with 200, "
        "`created: false` and `consolidated: true` — the memory keeps the longer wording. A new memory "
        "is 201.",
        request=MemoryCreateSerializer,
        responses={
            201: MemoryCreatedSerializer,
            200: OpenApiResponse(
                MemoryCreatedSerializer, description="Already stored, or consolidated: the existing memory."
            ),
            **error_responses(400, 401, 403),
        },
    )
    def post(self, request: Request) -> Response:
        user = request_user(request)
        serializer = MemoryCreateSerializer(data=request.data, context={"user": user})
        serializer.is_valid(raise_exception=True)
        result = memory_create(owner=user, **serializer.validated_data)
        body = MemoryCreatedSerializer(
            result.memory, context={"created": result.created, "consolidated": result.consolidated}
        ).data
        return Response(body, status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK)


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
        operation_id="memory_memories_partial_update",
        summary="Edit a memory's text (embedded again)",
        description="Its source, clock and reinforcements stay. A deleted memory cannot be edited "
        "(400, `invalid_operation`).",
        parameters=[MEMORY_ID],
        request=MemoryEditSerializer,
        responses={200: MemorySerializer, **error_responses(400, 401, 403, 404)},
    )
    def patch(self, request: Request, memory_id: str) -> Response:
        user = request_user(request)
        memory = memory_get_for_user(user=user, memory_id=memory_id)
        serializer = MemoryEditSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        memory = memory_update_content(owner=user, memory_id=memory.pk, content=serializer.validated_data["content"])
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


class _MemoryPinnedApi(ApiView):
    """Pins or unpins (``pinned``) a memory; each subclass is one endpoint, with its docs."""

    pinned: ClassVar[bool]

    def post(self, request: Request, memory_id: str) -> Response:
        user = request_user(request)
        memory = memory_get_for_user(user=user, memory_id=memory_id)
        return Response(MemorySerializer(memory_pin(owner=user, memory_id=memory.pk, pinned=self.pinned)).data)


def _pinned_schema(*, operation_id: str, summary: str, description: str) -> Callable[[type[Any]], type[Any]]:
    return extend_schema_view(
        post=extend_schema(
            operation_id=operation_id,
            summary=summary,
            description=description,
            request=None,
            parameters=[MEMORY_ID],
            responses={200: MemorySerializer, **error_responses(400, 401, 403, 404)},
        )
    )


@_pinned_schema(
    operation_id="memory_memories_pin",
    summary="Pin a memory: it becomes permanent and never fades",
    description="Pinning a pinned memory changes nothing. A deleted one: 400, `invalid_operation`.",
)
class MemoryPinApi(_MemoryPinnedApi):
    pinned = True


@_pinned_schema(
    operation_id="memory_memories_unpin",
    summary="Unpin a memory: back to the decay policy it had, its clock starting now",
    description="A memory created permanent becomes reinforceable. Unpinning an unpinned memory changes "
    "nothing. A deleted one: 400, `invalid_operation`.",
)
class MemoryUnpinApi(_MemoryPinnedApi):
    pinned = False


class MemoryStatusApi(ApiView):
    @extend_schema(
        operation_id="memory_memories_status",
        summary="The semantic memory store: model, dimensions, counts",
        responses={200: MemoryStatusSerializer, **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(memory_status(user=request_user(request)))
