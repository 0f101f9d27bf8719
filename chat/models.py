from __future__ import annotations

from django.conf import settings
from django.db import models

from core.models import LeasedModel

CHAT_MESSAGE_MAX_LENGTH = 20_000


class ChatSession(LeasedModel):
    """A conversation with the assistant, resumed until idle for CHAT_SESSION_TTL_HOURS
    or reset with /new. Its lease (``LeasedModel``) is held by the one worker answering
    its queue right now."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_sessions")
    project = models.ForeignKey(
        "projects.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="chat_sessions"
    )
    provider_session_id = models.CharField(max_length=200, blank=True)
    message_count = models.PositiveIntegerField(default=0)
    last_activity = models.DateTimeField(db_index=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        # The chat began inside the memory app; its tables kept their names when it
        # moved (chat/migrations/0001_initial.py).
        db_table = "memory_chatsession"
        ordering = ["-last_activity"]

    def __str__(self) -> str:
        return f"Chat {self.pk} of {self.user_id}"

    @property
    def processing(self) -> bool:
        """A worker is answering the queue: it holds the session's lease (chat/services.py)."""
        return self.lease_is_held


class ChatMessage(models.Model):
    class Role(models.TextChoices):
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        PROCESSING = "processing", "Processing"
        DONE = "done", "Done"
        ERROR = "error", "Error"

    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=16, choices=Role.choices)
    text = models.TextField(max_length=CHAT_MESSAGE_MAX_LENGTH, help_text="As shown to the user (markers removed).")
    confirmations = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DONE)
    reply_to = models.OneToOneField("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reply")
    attachment = models.BinaryField(null=True, blank=True, editable=False)
    attachment_type = models.CharField(max_length=50, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "memory_chatmessage"
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["session", "status", "id"], name="memory_chat_session_a92579_idx")]

    def __str__(self) -> str:
        return f"{self.role}: {self.text[:60]}"
