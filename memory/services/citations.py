"""Memories that cite code (memory.citations): their citations checked against a commit
(held, re-anchored, or gone: the memory is stale), moved to the code a change landed
with, and a person widening one to the whole project."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from memory.citations import (
    Citation,
    CitationCheck,
    CitationStatus,
    citation_check,
    citation_of_file,
    citations_from_json,
)
from memory.models.semantic import SOURCE_NOTE_MAX_LENGTH, DecayPolicy, Memory
from memory.services.semantic import memory_cited_paths_keep, memory_live_locked, memory_text_shortened

CANNOT_GENERALISE_DELETED = "A deleted memory cannot be changed."
STALE_REASON = "The code it cites is gone at {commit}: {what}."

# Reads each path's text at the commit being checked (None: no such file there).
FileReader = Callable[[set[str]], dict[str, str | None]]
# Whether the commit being checked contains the given one.
CommitTest = Callable[[str], bool]


def memory_generalise(*, owner: User, memory_id: int, now: datetime | None = None) -> Memory:
    """A person says a lesson learned on some files applies to the whole project: it is
    recalled for any task, no longer only for those touching its files. A stale one is
    given again: its citations, whose code is gone, are dropped."""
    now = now or timezone.now()
    with transaction.atomic():
        memory = memory_live_locked(owner=owner, memory_id=memory_id, deleted=CANNOT_GENERALISE_DELETED)
        changes: dict[str, Any] = {"path_scoped": False, "updated_at": now}
        if memory.stale_at is not None:
            changes.update(stale_at=None, stale_reason="", citations=[], checked_commit="")
            memory_cited_paths_keep(memory, [])
            if memory.decay_policy == DecayPolicy.REINFORCEABLE:
                # Given again from now: it fades from here, not from before it went stale.
                changes["last_reinforced_at"] = now
        Memory.objects.filter(pk=memory.pk).update(**changes)
        memory.refresh_from_db()
    return memory


def _memory_status(checks: list[CitationCheck]) -> str:
    statuses = {check.status for check in checks}
    if statuses == {CitationStatus.GONE}:
        return CitationStatus.GONE
    if statuses & {CitationStatus.MOVED, CitationStatus.CHANGED}:
        return CitationStatus.CHANGED if CitationStatus.CHANGED in statuses else CitationStatus.MOVED
    return CitationStatus.HOLDS


def _gone_label(check: CitationCheck, present: bool) -> str:
    return f"{check.citation.label} ({'text gone' if present else 'file gone'})"


def memory_citations_verify(
    *,
    owner: User,
    memories: Sequence[Memory],
    commit: str,
    read_files: FileReader,
    contains: CommitTest,
    now: datetime | None = None,
) -> dict[int, str]:
    """Check the citations of ``memories`` against ``commit`` and say, per memory id,
    what was found (a CitationStatus): its code holds; it moved or changed, and the
    citations now point at it (re-anchored); it is gone, and the memory is marked stale;
    or it is gone from a commit that does not contain the one the citations were read at
    (``contains`` says so: a change not merged there yet), which tells nothing, and the
    memory is used as it is.

    ``read_files(paths)`` gives each path's text at ``commit`` (None: no such file). A
    memory is checked once per commit; memories without citations hold."""
    now = now or timezone.now()
    found: dict[int, str] = {}
    to_check: list[tuple[Memory, list[Citation]]] = []
    for memory in memories:
        citations = citations_from_json(memory.citations)
        if not citations or memory.checked_commit == commit:
            found[memory.pk] = CitationStatus.HOLDS
        else:
            to_check.append((memory, citations))
    if not to_check:
        return found
    texts = read_files({citation.path for _, citations in to_check for citation in citations})
    for memory, citations in to_check:
        checks = [citation_check(c, texts.get(c.path), commit=commit) for c in citations]
        status = _memory_status(checks)
        changes: dict[str, Any] = {"checked_commit": commit, "updated_at": now}
        if status == CitationStatus.GONE:
            if not all(c.commit == commit or contains(c.commit) for c in citations):
                found[memory.pk] = CitationStatus.UNVERIFIED
                continue
            what = "; ".join(_gone_label(check, texts.get(check.citation.path) is not None) for check in checks)
            reason = STALE_REASON.format(commit=commit[:10], what=what)
            changes.update(stale_at=now, stale_reason=memory_text_shortened(reason, SOURCE_NOTE_MAX_LENGTH))
        else:
            # The gone ones stay as they were (the memory may be about them again later).
            # Re-anchoring keeps every path: the MemoryCitedPath rows stay as they are.
            kept = [check.citation for check in checks]
            changes.update(citations=[c.as_dict() for c in kept])
        found[memory.pk] = status
        Memory.objects.filter(pk=memory.pk, owner=owner, is_deleted=False).update(**changes)
    return found


def memory_citations_land(
    *, owner: User, memory_ids: Iterable[int], commit: str, read_files: FileReader, now: datetime | None = None
) -> int:
    """The change a run's lessons were learned on was accepted at ``commit``: their
    citations (read on the code as it was when a person commented, before the round
    that addressed it) move to the code that landed. Lines still there, moved or edited
    are re-anchored; lines the change removed leave a citation of their file; a file it
    removed leaves no citation, and a lesson left citing nothing is for the whole
    project. Returns how many memories changed."""
    now = now or timezone.now()
    memories = [m for m in Memory.objects.filter(owner=owner, pk__in=set(memory_ids), is_deleted=False) if m.citations]
    texts = read_files({c.path for m in memories for c in citations_from_json(m.citations)}) if memories else {}
    changed = 0
    for memory in memories:
        landed: list[Citation] = []
        for citation in citations_from_json(memory.citations):
            text = texts.get(citation.path)
            if text is None:
                continue
            check = citation_check(citation, text, commit=commit)
            landed.append(
                check.citation
                if check.status != CitationStatus.GONE
                else citation_of_file(path=citation.path, commit=commit)
            )
        with transaction.atomic():
            memory_cited_paths_keep(memory, landed)
            Memory.objects.filter(pk=memory.pk).update(
                citations=[c.as_dict() for c in landed],
                path_scoped=memory.path_scoped and bool(landed),
                checked_commit=commit,
                updated_at=now,
            )
        changed += 1
    return changed
