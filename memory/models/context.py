from __future__ import annotations

from django.conf import settings
from django.db import models


class ContextItem(models.Model):
    """A JSON chunk passed between agents. Identical content (same owner) is one item:
    its SHA-256 hash is unique. ``parent_ids`` are the items it was made from."""

    class Compression(models.TextChoices):
        GZIP = "gzip", "gzip"
        NONE = "none", "none"

    id = models.CharField(primary_key=True, max_length=40, editable=False)  # "ctx_<uuid hex>"
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="context_items")
    run = models.ForeignKey(
        "pipelines.PipelineRun", null=True, blank=True, on_delete=models.CASCADE, related_name="context_items"
    )
    type = models.CharField(max_length=50)
    agent_id = models.CharField(max_length=50, blank=True)
    content = models.BinaryField()
    compression = models.CharField(max_length=8, choices=Compression.choices, default=Compression.GZIP)
    content_hash = models.CharField(max_length=64, editable=False)
    size_bytes = models.PositiveIntegerField(default=0, help_text="Uncompressed size.")
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    parent_ids = models.JSONField(default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    accessed_at = models.DateTimeField(null=True, blank=True)
    access_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "content_hash"], name="memory_context_owner_hash_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.type})"
