"""Agent notes and daily logs over REST; both export markdown with ``?format=markdown``.

An agent's notes are its global notes (no ``project``) or its notes in one of the user's
projects (``?project=<id>``, or ``project`` in a body); a project that is not the user's
is a 404, like one that does not exist."""

from __future__ import annotations

import json
import re
from datetime import date
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from accounts.selectors import request_user
from core.api import ApiView, StrictCharField, error_responses
from core.converters import MAX_ID
from memory.models import DailyLogEntry
from memory.references import MEMORY_REFERENCE
from memory.selectors.notes import (
    daily_log_for_user,
    daily_log_markdown,
    notes_get_for_user,
    notes_markdown,
    notes_memories_live,
)
from memory.services.notes import PROMOTE_NEEDS_ONE, notes_append, notes_promote
from projects.models import Project
from projects.selectors import project_get_for_user

NOTE_TEXT_MAX = 20_000
BAD_DATE = "Expected a date as YYYY-MM-DD."
AGENT_ID = OpenApiParameter("agent_id", str, OpenApiParameter.PATH, description="The agent, e.g. `coder`.")
DAY = OpenApiParameter("day", str, OpenApiParameter.PATH, description="The day, YYYY-MM-DD.")
FORMAT = OpenApiParameter(
    "format", str, OpenApiParameter.QUERY, enum=["json", "markdown"], description="`markdown` returns text/markdown."
)


class MarkdownRenderer(BaseRenderer):
    """``?format=markdown`` (or ``Accept: text/markdown``): the export as text."""

    media_type = "text/markdown"
    format = "markdown"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        return text.encode(self.charset)


def _markdown(text: str, filename: str) -> Response:
    # The name comes from the URL: only plain characters go into the header (a newline
    # there would make Django refuse to send the response at all).
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", filename)[:100] or "export.md"
    return Response(text, headers={"Content-Disposition": f'inline; filename="{safe}"'})


def _wants_markdown(request: Request) -> bool:
    return getattr(request.accepted_renderer, "format", "") == "markdown"


class _MarkdownExportApi(ApiView):
    renderer_classes = [JSONRenderer, MarkdownRenderer]


PROJECT = OpenApiParameter(
    "project", int, OpenApiParameter.QUERY, description="One of your projects; absent: the notes for every project."
)


def _project_field() -> serializers.IntegerField:
    return serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_ID,
        help_text="One of your projects (404 if not); absent or null: the agent's notes for every project.",
    )


class NotesQuerySerializer(serializers.Serializer):
    project = _project_field()


class ReferenceSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    content = serializers.CharField(
        allow_null=True, help_text="The memory's text now; null when it is deleted or faded (left out of prompts)."
    )


class NotesSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    project = serializers.IntegerField(allow_null=True, help_text="The project, or null: the notes for every project.")
    content = serializers.CharField(help_text="Markdown; `[memory:<id>]` refers to a memory (see `references`).")
    references = ReferenceSerializer(many=True, help_text="The memories the notes refer to, in order.")
    updated_at = serializers.DateTimeField(allow_null=True)
    revisions = serializers.IntegerField(help_text="Earlier versions kept (one per summary).")


class NotesAppendSerializer(serializers.Serializer):
    text = StrictCharField(max_length=NOTE_TEXT_MAX, help_text="Markdown added under `## Updates`.")
    project = _project_field()


class PromoteSerializer(serializers.Serializer):
    project = _project_field()
    entry_id = serializers.IntegerField(required=False, help_text="A daily log entry of this agent.")
    text = StrictCharField(max_length=NOTE_TEXT_MAX, required=False, help_text="Or an insight as text.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("entry_id" in attrs) == bool(attrs.get("text")):
            raise serializers.ValidationError({"entry_id": [PROMOTE_NEEDS_ONE]})
        return attrs


class DailyEntrySerializer(serializers.ModelSerializer[DailyLogEntry]):
    input_context_ids = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = DailyLogEntry
        fields = (
            "id",
            "session",
            "type",
            "input_context_ids",
            "output_context_id",
            "duration_ms",
            "status",
            "error",
            "promoted",
            "created_at",
        )
        read_only_fields = fields


class DailyLogSerializer(serializers.Serializer):
    agent_id = serializers.CharField()
    date = serializers.DateField()
    entries = DailyEntrySerializer(many=True)


def _project(user: User, project_id: int | None) -> Project | None:
    return None if project_id is None else project_get_for_user(user=user, project_id=project_id)


def _query_project(request: Request) -> Project | None:
    query = NotesQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    return _project(request_user(request), query.validated_data.get("project"))


def _notes_body(user: User, agent_id: str, project: Project | None) -> dict[str, Any]:
    note = notes_get_for_user(user=user, agent_id=agent_id, project=project)
    content = note.content if note else ""
    ids = list(dict.fromkeys(int(found) for found in MEMORY_REFERENCE.findall(content)))
    live = notes_memories_live(owner=user, memory_ids=ids, project=project)
    return {
        "agent_id": agent_id,
        "project": project.pk if project else None,
        "content": content,
        "references": [{"id": memory_id, "content": live.get(memory_id)} for memory_id in ids],
        "updated_at": note.updated_at if note else None,
        "revisions": note.revision_count if note else 0,  # type: ignore[attr-defined]
    }


class AgentNotesApi(_MarkdownExportApi):
    @extend_schema(
        operation_id="memory_agents_notes_retrieve",
        summary="An agent's notes",
        description="The agent's notes for every project, or with `project` its notes in that project. "
        "An agent without notes yet has empty content. A reference `[memory:<id>]` is listed in "
        "`references` with the memory's text now; the markdown export shows that text.",
        parameters=[AGENT_ID, PROJECT, FORMAT],
        responses={200: NotesSerializer, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, agent_id: str) -> Response:
        user = request_user(request)
        project = _query_project(request)
        if _wants_markdown(request):
            note = notes_get_for_user(user=user, agent_id=agent_id, project=project)
            text = notes_markdown(agent_id=agent_id, note=note, project=project)
            suffix = f"-project-{project.pk}" if project else ""
            return _markdown(text, f"{agent_id}{suffix}-notes.md")
        return Response(NotesSerializer(_notes_body(user, agent_id, project)).data)

    @extend_schema(
        operation_id="memory_agents_notes_append",
        summary="Append to an agent's notes",
        request=NotesAppendSerializer,
        responses={201: NotesSerializer, **error_responses(400, 401, 403, 404)},
    )
    def post(self, request: Request, agent_id: str) -> Response:
        user = request_user(request)
        serializer = NotesAppendSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        project = _project(user, serializer.validated_data.get("project"))
        notes_append(owner=user, agent_id=agent_id[:50], text=serializer.validated_data["text"], project=project)
        body = _notes_body(user, agent_id[:50], project)
        return Response(NotesSerializer(body).data, status=status.HTTP_201_CREATED)


class AgentPromoteApi(ApiView):
    @extend_schema(
        operation_id="memory_agents_promote",
        summary="Promote a daily log entry (or an insight) into the notes",
        parameters=[AGENT_ID],
        request=PromoteSerializer,
        responses={200: NotesSerializer, **error_responses(400, 401, 403, 404, 409)},
    )
    def post(self, request: Request, agent_id: str) -> Response:
        user = request_user(request)
        serializer = PromoteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        project = _project(user, data.get("project"))
        notes_promote(
            owner=user, agent_id=agent_id[:50], entry_id=data.get("entry_id"), text=data.get("text"), project=project
        )
        return Response(NotesSerializer(_notes_body(user, agent_id[:50], project)).data)


class AgentDailyLogApi(_MarkdownExportApi):
    @extend_schema(
        operation_id="memory_agents_daily_retrieve",
        summary="An agent's daily log",
        parameters=[AGENT_ID, DAY, FORMAT],
        responses={200: DailyLogSerializer, **error_responses(400, 401, 404)},
    )
    def get(self, request: Request, agent_id: str, day: str) -> Response:
        try:
            when = date.fromisoformat(day)
        except ValueError:
            raise serializers.ValidationError({"date": [BAD_DATE]}) from None
        entries = list(daily_log_for_user(user=request_user(request), agent_id=agent_id, day=when))
        if _wants_markdown(request):
            return _markdown(daily_log_markdown(agent_id=agent_id, day=when, entries=entries), f"{agent_id}-{day}.md")
        return Response(DailyLogSerializer({"agent_id": agent_id, "date": when, "entries": entries}).data)
