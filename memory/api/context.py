"""The context store's REST API: save, read (counting accesses), touch, lineage."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.selectors import request_user
from core.api import ApiView, StrictCharField, StrictJSONField, error_responses
from memory.models import ContextItem
from memory.selectors.context import context_lineage, context_list_for_run_id
from memory.services.context import context_decode, context_get, context_get_many, context_save, context_touch

IDS_MAX = 100
LIST_NEEDS_FILTER = "Give `ids` (comma-separated) or `run`."
CONTEXT_ID = OpenApiParameter("context_id", str, OpenApiParameter.PATH, description="The item's id (`ctx_…`).")


@extend_schema_field({"description": "Any JSON value."})
class AnyJsonField(StrictJSONField):
    pass


@extend_schema_field({"type": "object", "additionalProperties": True})
class ObjectField(StrictJSONField):
    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError("Expected a JSON object.")
        return super().to_internal_value(data)


class ContextItemSummarySerializer(serializers.ModelSerializer[ContextItem]):
    run = serializers.IntegerField(source="run_id", read_only=True, allow_null=True, help_text="The pipeline run.")
    metadata = ObjectField(read_only=True)
    parent_ids = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = ContextItem
        fields: tuple[str, ...] = (
            "id",
            "type",
            "agent_id",
            "run",
            "compression",
            "content_hash",
            "size_bytes",
            "parent_ids",
            "metadata",
            "created_at",
            "expires_at",
            "accessed_at",
            "access_count",
        )
        read_only_fields: tuple[str, ...] = fields


class ContextItemSerializer(ContextItemSummarySerializer):
    content = serializers.SerializerMethodField(help_text="The JSON content, decompressed.")

    class Meta(ContextItemSummarySerializer.Meta):
        fields = (*ContextItemSummarySerializer.Meta.fields, "content")
        read_only_fields = fields

    @extend_schema_field({"description": "Any JSON value."})
    def get_content(self, item: ContextItem) -> Any:
        return context_decode(item)


class ContextCreateSerializer(serializers.Serializer):
    type = StrictCharField(max_length=50)
    agent_id = StrictCharField(max_length=50, required=False, allow_blank=True, default="")
    content = AnyJsonField(help_text="Any JSON, at most 1 MiB once serialised.")
    compression = serializers.ChoiceField(choices=ContextItem.Compression.choices, default="gzip")
    parent_ids = serializers.ListField(child=StrictCharField(max_length=40), required=False, max_length=100)
    metadata = ObjectField(required=False)
    ttl_seconds = serializers.IntegerField(
        required=False, min_value=0, max_value=10 * 365 * 86400, help_text="0 = never expires."
    )


class ContextListQuerySerializer(serializers.Serializer):
    ids = StrictCharField(required=False, help_text=f"Comma-separated ids (at most {IDS_MAX}); counts an access.")
    run = serializers.IntegerField(required=False, help_text="A pipeline run of yours: its items, oldest first.")

    def validate_ids(self, value: str) -> list[str]:
        ids = [part.strip() for part in value.split(",") if part.strip()]
        if len(ids) > IDS_MAX:
            raise serializers.ValidationError(f"At most {IDS_MAX} ids.")
        return ids

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs.get("ids") and attrs.get("run") is None:
            raise serializers.ValidationError({"ids": [LIST_NEEDS_FILTER]})
        return attrs


class LineageNodeSerializer(ContextItemSummarySerializer):
    class Meta(ContextItemSummarySerializer.Meta):
        pass


class LineageEdgeSerializer(serializers.Serializer):
    parent_id = serializers.CharField(help_text="The parent item.")
    child_id = serializers.CharField(help_text="The item made from it.")


class LineageSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="The item asked about.")
    nodes = LineageNodeSerializer(many=True)
    edges = LineageEdgeSerializer(many=True)


class ContextListApi(ApiView):
    @extend_schema(
        operation_id="memory_contexts_list",
        summary="Context items by id or by pipeline run",
        description="`ids=a,b` returns those items (content included, one access counted each; unknown, "
        "expired and other users' ids are skipped). `run=<id>` returns the run's items with their parents "
        "(no content), oldest first: the run's lineage.",
        parameters=[ContextListQuerySerializer],
        responses={200: ContextItemSerializer(many=True), **error_responses(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        user = request_user(request)
        query = ContextListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        if query.validated_data.get("ids"):
            items = context_get_many(user=user, context_ids=query.validated_data["ids"])
            return Response(ContextItemSerializer(items, many=True).data)
        items = context_list_for_run_id(user=user, run_id=query.validated_data["run"])
        return Response(ContextItemSummarySerializer(items, many=True).data)

    @extend_schema(
        operation_id="memory_contexts_create",
        summary="Save a context item",
        description="Identical content (same owner) is one item: saving it again returns the existing item with 200.",
        request=ContextCreateSerializer,
        responses={201: ContextItemSerializer, 200: ContextItemSerializer, **error_responses(400, 401, 403)},
    )
    def post(self, request: Request) -> Response:
        serializer = ContextCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        item, created = context_save(
            owner=request_user(request),
            type=data["type"],
            agent_id=data.get("agent_id", ""),
            content=data["content"],
            compression=data["compression"],
            parent_ids=data.get("parent_ids"),
            metadata=data.get("metadata"),
            ttl_seconds=data.get("ttl_seconds"),
        )
        return Response(
            ContextItemSerializer(item).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )


class ContextDetailApi(ApiView):
    @extend_schema(
        operation_id="memory_contexts_retrieve",
        summary="A context item, content decompressed (counts an access)",
        parameters=[CONTEXT_ID],
        responses={200: ContextItemSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, context_id: str) -> Response:
        return Response(ContextItemSerializer(context_get(user=request_user(request), context_id=context_id)).data)


class ContextTouchApi(ApiView):
    @extend_schema(
        operation_id="memory_contexts_touch",
        summary="Count an access without reading the content",
        parameters=[CONTEXT_ID],
        request=None,
        responses={200: ContextItemSummarySerializer, **error_responses(401, 403, 404)},
    )
    def post(self, request: Request, context_id: str) -> Response:
        item = context_touch(user=request_user(request), context_id=context_id)
        return Response(ContextItemSummarySerializer(item).data)


class ContextLineageApi(ApiView):
    @extend_schema(
        operation_id="memory_contexts_lineage",
        summary="An item's ancestors and descendants as a graph",
        description="`nodes` are the items (no content); an edge links a parent (`parent_id`) to an item "
        "made from it (`child_id`).",
        parameters=[CONTEXT_ID],
        responses={200: LineageSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request, context_id: str) -> Response:
        graph = context_lineage(user=request_user(request), context_id=context_id)
        return Response(
            {
                "id": graph["root"],
                "nodes": ContextItemSummarySerializer(graph["nodes"], many=True).data,
                "edges": [{"parent_id": edge["from"], "child_id": edge["to"]} for edge in graph["edges"]],
            }
        )
