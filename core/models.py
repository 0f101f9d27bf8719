from __future__ import annotations

from django.db import models
from django.utils import timezone


class TimeStampedModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class LeasedModel(models.Model):
    """The columns of a lease (``core.leases.Lease``): who holds the row, until when."""

    lease_owner = models.CharField(max_length=64, blank=True, editable=False)
    lease_expires_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True

    @property
    def lease_is_held(self) -> bool:
        """Someone holds a live lease on the row (as of when it was read)."""
        return bool(self.lease_owner) and self.lease_expires_at is not None and self.lease_expires_at > timezone.now()
