"""Chat with the assistant over the API: send (queued, answered in order), history, state."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.models import User
from accounts.selectors import request_user
from chat.events import chat_message_payload
from chat.models import CHAT_MESSAGE_MAX_LENGTH, ChatMessage
from chat.selectors import chat_message_list, chat_session_current_open, chat_session_state
from chat.services import ChatImage, chat_image_validate, chat_message_send
from core.api import ApiView, StrictCharField, error_responses
from core.parsers import SafeJSONParser
from projects.models import Project
from projects.selectors import project_get_for_user

PROJECT_PARAMETER = OpenApiParameter(
    "project", int, OpenApiParameter.QUERY, required=False, description="One of your projects (default: none)."
)
SESSION_PARAMETER = OpenApiParameter(
    "session",
    str,
    OpenApiParameter.QUERY,
    required=False,
    enum=["current", "all"],
    description="`current` (default): the conversation in progress; `all`: every session's messages.",
)


class ChatMessageSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    session_id = serializers.IntegerField()
    role = serializers.ChoiceField(choices=ChatMessage.Role.choices)
    text = serializers.CharField(help_text="As shown to the user (memory markers removed).")
    confirmations = serializers.ListField(child=serializers.CharField(), help_text="E.g. `Remembered: …`.")
    status = serializers.ChoiceField(choices=ChatMessage.Status.choices)
    reply_to = serializers.IntegerField(allow_null=True, help_text="The user message an assistant reply answers.")
    has_image = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class ChatSendSerializer(serializers.Serializer):
    text = StrictCharField(max_length=CHAT_MESSAGE_MAX_LENGTH, trim_whitespace=False)
    project = serializers.IntegerField(required=False, allow_null=True, help_text="One of your projects.")
    image = serializers.FileField(
        required=False, help_text="Optional PNG, JPEG, GIF or WebP image (multipart/form-data only)."
    )

    def validate_text(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("This field may not be blank.")
        return value


class ChatSendResponseSerializer(serializers.Serializer):
    message = ChatMessageSerializer()
    queue_position = serializers.IntegerField(help_text="1: answered next; 0: not queued (e.g. `/new`).")


class ChatSessionSerializer(serializers.Serializer):
    session_id = serializers.IntegerField(allow_null=True, help_text="Null until the first message.")
    last_activity = serializers.DateTimeField(allow_null=True)
    message_count = serializers.IntegerField()
    queue_size = serializers.IntegerField()
    processing = serializers.BooleanField()


def _project(user: User, project_id: Any) -> Project | None:
    if project_id in (None, ""):
        return None
    return project_get_for_user(user=user, project_id=project_id)


class ChatMessagesApi(GenericAPIView[ChatMessage]):
    parser_classes = [SafeJSONParser, MultiPartParser]
    serializer_class = ChatMessageSerializer
    queryset = ChatMessage.objects.none()  # for the schema; rows come from the selector

    @extend_schema(
        operation_id="chat_messages_list",
        summary="Chat history as shown to you: newest page first, oldest first within a page",
        parameters=[PROJECT_PARAMETER, SESSION_PARAMETER],
        responses={200: ChatMessageSerializer(many=True), **error_responses(400, 401, 404)},
    )
    def get(self, request: Request) -> Response:
        user = request_user(request)
        project = _project(user, request.query_params.get("project"))
        scope = request.query_params.get("session") or "current"
        if scope not in ("current", "all"):
            raise serializers.ValidationError({"session": ["Must be `current` or `all`."]})
        if scope == "current":
            session = chat_session_current_open(user=user, project=project)
            if session is None:
                messages = ChatMessage.objects.none()
            else:
                messages = chat_message_list(user=user, project=project, session=session)
        else:
            messages = chat_message_list(user=user, project=project, session=None)
        page = self.paginate_queryset(messages.reverse())
        rows = [chat_message_payload(message) for message in reversed(page or [])]
        return self.get_paginated_response(rows)

    @extend_schema(
        operation_id="chat_messages_send",
        summary="Send a message to the assistant (queued; answered in order, streamed over /ws/chat)",
        request={"application/json": ChatSendSerializer, "multipart/form-data": ChatSendSerializer},
        responses={202: ChatSendResponseSerializer, **error_responses(400, 401, 404)},
    )
    def post(self, request: Request) -> Response:
        user = request_user(request)
        body = ChatSendSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        project = _project(user, body.validated_data.get("project"))
        image: ChatImage | None = None
        upload = body.validated_data.get("image")
        if upload is not None:
            limit = settings.CHAT_ATTACHMENT_MAX_BYTES
            # Read one byte past the limit at most: enough to refuse a larger file.
            image = chat_image_validate(data=upload.read(limit + 1), max_bytes=limit)
        message, position = chat_message_send(user=user, project=project, text=body.validated_data["text"], image=image)
        return Response(
            {"message": chat_message_payload(message), "queue_position": position}, status=status.HTTP_202_ACCEPTED
        )


class ChatSessionApi(ApiView):
    @extend_schema(
        operation_id="chat_session_retrieve",
        summary="The conversation in progress: its queue and whether a message is being answered",
        parameters=[PROJECT_PARAMETER],
        responses={200: ChatSessionSerializer, **error_responses(401, 404)},
    )
    def get(self, request: Request) -> Response:
        user = request_user(request)
        project = _project(user, request.query_params.get("project"))
        return Response(ChatSessionSerializer(chat_session_state(user=user, project=project)).data)
