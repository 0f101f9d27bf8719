"""Migration 0004 turns stored float32 bytes into searchable vectors (pgvector on
PostgreSQL) without losing one, and back."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from memory.embeddings import DIMENSIONS, EMBEDDING_MODEL
from tests.migrations import migrate, migrate_to_latest

BEFORE = [("memory", "0003_memory_source_and_uses")]
AFTER = [("memory", "0004_memory_embedding_vector")]


@pytest.mark.django_db(transaction=True)
def test_stored_bytes_become_vectors_and_back(django_user_model) -> None:  # type: ignore[no-untyped-def]
    try:
        old_apps = migrate(BEFORE)
        OldMemory = old_apps.get_model("memory", "Memory")
        user = old_apps.get_model("accounts", "User").objects.create(email="migrate@example.com")
        rng = np.random.default_rng(4)
        vectors = [rng.standard_normal(DIMENSIONS).astype("<f4") for _ in range(3)]
        now = timezone.now()
        common = {"owner_id": user.pk, "created_at": now, "last_reinforced_at": now, "content_hash": "h" * 64}
        kept = [
            OldMemory.objects.create(
                content=f"m{i}", embedding=vector.tobytes(), embedding_model=EMBEDDING_MODEL, **common
            ).pk
            for i, vector in enumerate(vectors)
        ]
        wrong_size = OldMemory.objects.create(
            content="short", embedding=b"\x00" * 8, embedding_model=EMBEDDING_MODEL, **common
        ).pk

        new_apps = migrate(AFTER)
        NewMemory = new_apps.get_model("memory", "Memory")
        for pk, vector in zip(kept, vectors, strict=True):
            row = NewMemory.objects.get(pk=pk)
            assert np.array_equal(row.embedding, vector)  # bit for bit
            assert row.embedding_model == EMBEDDING_MODEL
        odd = NewMemory.objects.get(pk=wrong_size)
        if connection.vendor == "postgresql":
            # Could never be searched: kept as a zero vector of no model.
            assert (odd.embedding_model, float(np.abs(odd.embedding).sum())) == ("", 0.0)
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                    "WHERE attrelid = 'memory_memory'::regclass AND attname = 'embedding'"
                )
                assert cursor.fetchone() == (f"vector({DIMENSIONS})",)

        back_apps = migrate(BEFORE)
        BackMemory = back_apps.get_model("memory", "Memory")
        for pk, vector in zip(kept, vectors, strict=True):
            assert bytes(BackMemory.objects.get(pk=pk).embedding) == vector.tobytes()
    finally:
        # Later migrations (memory's and those depending on it) were unapplied too.
        migrate_to_latest()
