"""Admin pages of the context store, notes and daily logs render."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote

from memory.models import AgentNoteRevision
from memory.services.context import context_save
from memory.services.notes import daily_log_record, notes_append

pytestmark = pytest.mark.django_db


def test_admin_pages(owner, client, monkeypatch) -> None:
    from memory import tasks

    monkeypatch.setattr(tasks.memory_summarise_note, "delay", lambda note_id: None)
    owner.is_staff = owner.is_superuser = True
    owner.save()
    item, _ = context_save(owner=owner, type="plan", content={"steps": ["<b>one</b>"]})
    note = notes_append(owner=owner, agent_id="coder", text="Insight")
    AgentNoteRevision.objects.create(note=note, content="Older notes", reason="Summarised")
    daily_log_record(owner=owner, agent_id="coder", session="run-1", type="plan")
    client.force_login(owner)

    # Quoted, as the admin's links are: an id like "ctx_23ab…" unquoted is "ctx#ab…" (a
    # 1-in-40 failure while this test used the raw id).
    change = client.get(f"/admin/memory/contextitem/{quote(item.pk)}/change/")
    assert change.status_code == 200
    html = change.content.decode()
    assert "&lt;b&gt;one&lt;/b&gt;" in html and "Content (decompressed)" in html
    assert client.get("/admin/memory/contextitem/").status_code == 200
    note_page = client.get(f"/admin/memory/agentnote/{note.pk}/change/")
    assert note_page.status_code == 200 and "Older notes" in note_page.content.decode()
    assert client.get("/admin/memory/dailylogentry/?status__exact=ok").status_code == 200
