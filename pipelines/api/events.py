"""The task's live events as Server-Sent Events, for scripts.

The database is the source: the stream replays what was persisted after
``Last-Event-ID`` (header, or ``last_event_id`` query parameter) and then polls for new
events, so a client that reconnects misses nothing and no channel layer is needed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import renderers
from rest_framework.request import Request

from accounts.selectors import request_user
from core.api import ApiView, error_responses
from pipelines.events import EventType, as_message
from pipelines.runs.selectors import run_events
from tasks.models import Task
from tasks.selectors import task_get_for_user

POLL_SECONDS = 0.25
KEEPALIVE_SECONDS = 30.0


class EventStreamRenderer(renderers.BaseRenderer):
    media_type = "text/event-stream"
    format = "sse"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        # Only error bodies are rendered here; the stream itself bypasses renderers.
        return json.dumps(data).encode()


def sse_frame(message: dict[str, Any]) -> str:
    return f"id: {message['id']}\nevent: {message['type']}\ndata: {json.dumps(message)}\n\n"


def _last_event_id(request: Request) -> int:
    raw = request.headers.get("Last-Event-ID") or request.query_params.get("last_event_id") or "0"
    try:
        return max(0, int(raw))
    except ValueError:
        return 0


def _batch(task: Task, after_id: int) -> list[dict[str, Any]]:
    return [as_message(event) for event in run_events(task=task, after_id=after_id, limit=500)]


async def event_stream(
    task: Task, after_id: int, follow: bool, keepalive: float = KEEPALIVE_SECONDS
) -> AsyncIterator[str]:
    fetch = sync_to_async(_batch)
    last_sent = time.monotonic()
    yield "retry: 2000\n\n"
    while True:
        batch = await fetch(task, after_id)
        for message in batch:
            after_id = message["id"]
            yield sse_frame(message)
            last_sent = time.monotonic()
        if not follow and len(batch) < 500:
            return
        if time.monotonic() - last_sent >= keepalive:
            yield ": keepalive\n\n"
            last_sent = time.monotonic()
        if not batch:
            await asyncio.sleep(POLL_SECONDS)


class TaskEventsApi(ApiView):
    renderer_classes = [renderers.JSONRenderer, EventStreamRenderer]

    @extend_schema(
        operation_id="tasks_events",
        summary="The task's live events (Server-Sent Events)",
        description=(
            "Every event of the task's runs as `text/event-stream`: `id` is the sequence number, "
            "`event` the type (" + ", ".join(t.value for t in EventType) + "), `data` the JSON "
            "`{id, type, data}`. Resume with the `Last-Event-ID` header. Keepalive comments every 30 s. "
            "With `follow=false` the stream ends after the events so far."
        ),
        parameters=[
            OpenApiParameter("last_event_id", int, description="Resume after this event id."),
            OpenApiParameter("follow", bool, description="Keep the stream open for new events (default true)."),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(response=OpenApiTypes.STR, description="The event stream."),
            **error_responses(401, 404),
        },
    )
    def get(self, request: Request, task_id: str) -> StreamingHttpResponse:
        task = task_get_for_user(user=request_user(request), task_id=task_id)
        follow = request.query_params.get("follow", "true").lower() not in ("0", "false", "no")
        response = StreamingHttpResponse(
            event_stream(task, _last_event_id(request), follow), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response
