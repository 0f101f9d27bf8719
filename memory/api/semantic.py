"""Semantic memories: list, create (deduplicated, near-duplicates consolidated), search by
meaning, read, edit, pin, reinforce, delete. What they read and write:
memory/api/semantic_serializers.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from accounts.selectors import request_user
from core.api import ApiView, SafeJSONParser, error_responses
from memory.models.semantic import Memory
from memory.selectors.semantic import (
    memory_get_for_user,
    memory_list_for_user,
    memory_search,
    memory_status,
    memory_uses_for,
)
from memory.services.citations import memory_generalise
from memory.services.semantic import (
    memory_create,
    memory_delete,
    memory_pin,
    memory_reinforce,
    memory_share,
    memory_update_content,
)
from projects.selectors import project_get_for_user

from .semantic_serializers import (
    MemoryCreatedSerializer,
    MemoryCreateSerializer,
    MemoryEditSerializer,
    MemoryListQuerySerializer,
    MemorySearchQuerySerializer,
    MemorySearchResponseSerializer,
    MemorySerializer,
    MemoryStatusSerializer,
    search_result_data,
)

MEMORY_ID = OpenApiParameter("memory_id", int, OpenApiParameter.PATH, description="The memory's id.")


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
        memory = memory_update_content(
            owner=user,
            memory_id=memory.pk,
            content=serializer.validated_data.get("content", memory.content),
            applies_when=serializer.validated_data.get("applies_when"),
        )
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


class _MemoryActionApi(ApiView):
    """POST: one service on the user's memory (``act``), answered with the memory; each
    subclass is one endpoint, its docs given by ``_action_schema``."""

    def act(self, user: User, memory_id: int) -> Memory:
        raise NotImplementedError

    def post(self, request: Request, memory_id: str) -> Response:
        user = request_user(request)
        memory = memory_get_for_user(user=user, memory_id=memory_id)
        return Response(MemorySerializer(self.act(user, memory.pk)).data)


def _action_schema(*, operation_id: str, summary: str, description: str) -> Callable[[type[Any]], type[Any]]:
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


@_action_schema(
    operation_id="memory_memories_reinforce",
    summary="Reinforce a memory: its confidence clock starts again",
    description="Permanent, deleted and stale memories cannot be reinforced (400, `invalid_operation`).",
)
class MemoryReinforceApi(_MemoryActionApi):
    def act(self, user: User, memory_id: int) -> Memory:
        return memory_reinforce(owner=user, memory_id=memory_id)


@_action_schema(
    operation_id="memory_memories_generalise",
    summary="Make a memory the whole project's: given to any task, not only to those touching its files",
    description="A stale memory (its code is gone) is given again, without its citations. A deleted one: "
    "400, `invalid_operation`.",
)
class MemoryGeneraliseApi(_MemoryActionApi):
    def act(self, user: User, memory_id: int) -> Memory:
        return memory_generalise(owner=user, memory_id=memory_id)


class _MemoryPinnedApi(_MemoryActionApi):
    """Pins or unpins (``pinned``) a memory."""

    pinned: ClassVar[bool]

    def act(self, user: User, memory_id: int) -> Memory:
        return memory_pin(owner=user, memory_id=memory_id, pinned=self.pinned)


@_action_schema(
    operation_id="memory_memories_pin",
    summary="Pin a memory: it becomes permanent and never fades",
    description="Pinning a pinned memory changes nothing. A deleted one: 400, `invalid_operation`.",
)
class MemoryPinApi(_MemoryPinnedApi):
    pinned = True


@_action_schema(
    operation_id="memory_memories_unpin",
    summary="Unpin a memory: back to the decay policy it had, its clock starting now",
    description="A memory created permanent becomes reinforceable. Unpinning an unpinned memory changes "
    "nothing. A deleted one: 400, `invalid_operation`.",
)
class MemoryUnpinApi(_MemoryPinnedApi):
    pinned = False


class _MemorySharedApi(_MemoryActionApi):
    """Shares a memory with every project (``shared``) or keeps it to its own."""

    shared: ClassVar[bool]

    def act(self, user: User, memory_id: int) -> Memory:
        return memory_share(owner=user, memory_id=memory_id, shared=self.shared)


@_action_schema(
    operation_id="memory_memories_share",
    summary="Share a memory with every project: any task of any of your projects may be given it",
    description="A lesson belongs to the project that taught it until you share it. A deleted one: 400, "
    "`invalid_operation`.",
)
class MemoryShareApi(_MemorySharedApi):
    shared = True


@_action_schema(
    operation_id="memory_memories_unshare",
    summary="Keep a shared memory to its own project again",
    description="A memory of no project cannot be unshared (no agent would be given it); a deleted one "
    "neither: 400, `invalid_operation`.",
)
class MemoryUnshareApi(_MemorySharedApi):
    shared = False


class MemoryStatusApi(ApiView):
    @extend_schema(
        operation_id="memory_memories_status",
        summary="The semantic memory store: model, dimensions, counts",
        responses={200: MemoryStatusSerializer, **error_responses(401)},
    )
    def get(self, request: Request) -> Response:
        return Response(memory_status(user=request_user(request)))
