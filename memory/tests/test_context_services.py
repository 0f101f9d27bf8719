"""The context store's services: dedup, compression, expiry and atomic access counts."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from core.exceptions import NotFound
from memory.models import ContextItem
from memory.services.context import (
    CONTENT_MAX_BYTES,
    CONTENT_TOO_LARGE,
    canonical_json,
    context_decode,
    context_delete_expired,
    context_get,
    context_get_many,
    context_save,
    context_touch,
)
from tests.threads import DatabaseThread

pytestmark = pytest.mark.django_db

CONTENT = {"b": [1, 2, {"z": "é", "a": None}], "a": "hello"}


def test_same_content_is_the_same_item_whatever_the_key_order_or_compression(owner) -> None:
    first, created = context_save(owner=owner, type="plan", content=CONTENT)
    reordered = {"a": "hello", "b": [1, 2, {"a": None, "z": "é"}]}
    second, created_again = context_save(owner=owner, type="other", content=reordered, compression="none")
    assert created and not created_again
    assert second.pk == first.pk
    assert first.pk.startswith("ctx_") and len(first.pk) == 36
    assert ContextItem.objects.count() == 1


def test_other_owners_do_not_share_items(owner, other_user) -> None:
    mine, _ = context_save(owner=owner, type="plan", content=CONTENT)
    theirs, created = context_save(owner=other_user, type="plan", content=CONTENT)
    assert created and theirs.pk != mine.pk


def test_gzip_round_trip_and_hash(owner) -> None:
    item, _ = context_save(owner=owner, type="plan", content=CONTENT, metadata={"k": 1}, agent_id="planner")
    item.refresh_from_db()
    assert item.compression == "gzip"
    assert gzip.decompress(bytes(item.content)) == canonical_json(CONTENT)
    assert context_decode(item) == CONTENT
    assert item.size_bytes == len(canonical_json(CONTENT))
    import hashlib

    assert item.content_hash == hashlib.sha256(canonical_json(CONTENT)).hexdigest()


def test_uncompressed_round_trip(owner) -> None:
    item, _ = context_save(owner=owner, type="raw", content=[1, "two", 3.5], compression="none")
    item.refresh_from_db()
    assert bytes(item.content) == b'[1,"two",3.5]'
    assert context_decode(item) == [1, "two", 3.5]


def test_content_over_the_limit_is_refused(owner) -> None:
    with pytest.raises(ValidationError) as excinfo:
        context_save(owner=owner, type="big", content="x" * CONTENT_MAX_BYTES)
    assert excinfo.value.message_dict == {"content": [CONTENT_TOO_LARGE]}


def test_parents_must_be_the_owners_items(owner, other_user) -> None:
    theirs, _ = context_save(owner=other_user, type="plan", content={"x": 1})
    with pytest.raises(ValidationError):
        context_save(owner=owner, type="plan", content={"x": 2}, parent_ids=[theirs.pk])
    parent, _ = context_save(owner=owner, type="task", content={"x": 3})
    child, _ = context_save(owner=owner, type="plan", content={"x": 4}, parent_ids=[parent.pk, parent.pk])
    assert child.parent_ids == [parent.pk]


def test_expiry_defaults_to_the_ttl_setting_and_zero_means_never(owner, settings) -> None:
    settings.CONTEXT_TTL_DAYS = 7
    item, _ = context_save(owner=owner, type="a", content=1)
    assert item.expires_at is not None
    assert timedelta(days=6, hours=23) < item.expires_at - timezone.now() <= timedelta(days=7)
    forever, _ = context_save(owner=owner, type="a", content=2, ttl_seconds=0)
    assert forever.expires_at is None
    settings.CONTEXT_TTL_DAYS = 0
    also_forever, _ = context_save(owner=owner, type="a", content=3)
    assert also_forever.expires_at is None


def test_expired_items_are_not_found_and_deleted_by_the_cleanup(owner) -> None:
    old, _ = context_save(owner=owner, type="a", content="old", ttl_seconds=60)
    live, _ = context_save(owner=owner, type="a", content="live", ttl_seconds=3600)
    forever, _ = context_save(owner=owner, type="a", content="forever", ttl_seconds=0)
    later = timezone.now() + timedelta(minutes=5)
    ContextItem.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(NotFound):
        context_get(user=owner, context_id=old.pk)
    assert [item.pk for item in context_get_many(user=owner, context_ids=[old.pk, live.pk])] == [live.pk]
    assert context_delete_expired(now=later) == 1
    assert set(ContextItem.objects.values_list("pk", flat=True)) == {live.pk, forever.pk}
    assert context_delete_expired(now=later) == 0


def test_get_and_touch_count_accesses(owner, other_user) -> None:
    item, _ = context_save(owner=owner, type="a", content="x")
    assert item.access_count == 0 and item.accessed_at is None
    context_get(user=owner, context_id=item.pk)
    touched = context_touch(user=owner, context_id=item.pk)
    many = context_get_many(user=owner, context_ids=[item.pk, "ctx_nope", item.pk])
    assert touched.access_count == 2 and touched.accessed_at is not None
    assert [m.access_count for m in many] == [3]
    with pytest.raises(NotFound):
        context_get(user=other_user, context_id=item.pk)
    item.refresh_from_db()
    assert item.access_count == 3


def _in_threads(n: int, target: Callable[[], object]) -> list[object]:
    results: list[object] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run() -> None:
        try:
            barrier.wait()
            results.append(target())
        except BaseException as exc:
            errors.append(exc)

    threads = [DatabaseThread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_gets_lose_no_count(owner) -> None:
    item, _ = context_save(owner=owner, type="a", content={"shared": True})
    _in_threads(20, lambda: context_get(user=owner, context_id=item.pk))
    item.refresh_from_db()
    assert item.access_count == 20


@pytest.mark.django_db(transaction=True)
def test_concurrent_saves_of_the_same_content_make_one_item(owner) -> None:
    results = cast(
        list[tuple[ContextItem, bool]],
        _in_threads(8, lambda: context_save(owner=owner, type="a", content={"race": 1})),
    )
    assert len({item.pk for item, _ in results}) == 1
    assert sum(1 for _, created in results if created) == 1
    assert ContextItem.objects.filter(owner=owner).count() == 1


def test_losing_the_insert_race_returns_the_winner(owner, monkeypatch) -> None:
    winner, _ = context_save(owner=owner, type="a", content={"w": 1})
    # The first lookup misses (as if the winner had not committed yet); the insert then
    # hits the unique constraint and the winner is fetched.
    real_filter = ContextItem.objects.filter
    calls = {"n": 0}

    def filter_missing_once(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            return ContextItem.objects.none()
        return real_filter(*args, **kwargs)

    monkeypatch.setattr(ContextItem.objects, "filter", filter_missing_once)
    item, created = context_save(owner=owner, type="a", content={"w": 1})
    assert not created and item.pk == winner.pk
