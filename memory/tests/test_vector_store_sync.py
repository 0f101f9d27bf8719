"""The index's sync reads only the recent rows, through the updated_at index."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import User
from memory.services.semantic import memory_create
from memory.vector_store import SemanticIndex

pytestmark = pytest.mark.django_db


def test_sync_window_is_read_without_an_order(owner: User) -> None:
    memory_create(owner=owner, content="Deployments are frozen on Fridays.")
    index = SemanticIndex()
    index.sync()
    with CaptureQueriesContext(connection) as ctx:
        index.sync()
    window = [q["sql"] for q in ctx.captured_queries if '"updated_at" >=' in q["sql"]]
    assert len(window) == 1
    # An ORDER BY on created_at (Memory's default) made SQLite scan every row.
    assert "ORDER BY" not in window[0]
