"""Agent notes and daily logs over REST and as pages, with personas."""

from __future__ import annotations

import pytest
from django.utils import timezone

from memory.models import AgentNote, AgentNoteRevision
from memory.services.notes import daily_log_record, notes_append
from tests.api_helpers import assert_error, field_errors

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_summary_jobs(monkeypatch) -> None:
    from memory import tasks

    monkeypatch.setattr(tasks.memory_summarise_note, "delay", lambda note_id: None)


def _entry(owner, **kwargs):
    defaults = {"agent_id": "coder", "session": "run-7", "type": "changes", "duration_ms": 10}
    return daily_log_record(owner=owner, **{**defaults, **kwargs})


def test_notes_get_empty_then_append(owner_client) -> None:
    empty = owner_client.get("/api/memory/agents/coder/notes")
    assert empty.status_code == 200
    assert empty.json() == {"agent_id": "coder", "content": "", "updated_at": None, "revisions": 0}
    created = owner_client.post("/api/memory/agents/coder/notes", {"text": "Keep it small."}, format="json")
    assert created.status_code == 201
    body = created.json()
    assert "## Updates" in body["content"] and "Keep it small." in body["content"]
    assert body["updated_at"] is not None
    assert owner_client.get("/api/memory/agents/coder/notes").json()["content"] == body["content"]


def test_notes_count_revisions(owner, owner_client) -> None:
    note = notes_append(owner=owner, agent_id="coder", text="x")
    AgentNoteRevision.objects.create(note=note, content="old")
    assert owner_client.get("/api/memory/agents/coder/notes").json()["revisions"] == 1


@pytest.mark.parametrize("body", [{}, {"text": ""}, {"text": 3}, {"text": "x" * 20_001}])
def test_append_bad_input(owner_client, body) -> None:
    assert "text" in field_errors(owner_client.post("/api/memory/agents/coder/notes", body, format="json"))


def test_notes_markdown_export(owner, owner_client) -> None:
    notes_append(owner=owner, agent_id="coder", text="Insight **one**")
    response = owner_client.get("/api/memory/agents/coder/notes", {"format": "markdown"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/markdown")
    assert response.content.decode().startswith("# Notes of coder\n\n## Updates")


def test_other_users_notes_are_invisible(owner, other_client) -> None:
    notes_append(owner=owner, agent_id="coder", text="secret")
    assert other_client.get("/api/memory/agents/coder/notes").json()["content"] == ""
    other_client.post("/api/memory/agents/coder/notes", {"text": "mine"}, format="json")
    assert "secret" not in AgentNote.objects.get(owner__email="bob@example.com").content
    assert "mine" not in AgentNote.objects.get(owner=owner).content


def test_promote_entry_and_text(owner, owner_client, other_client) -> None:
    entry = _entry(owner, outcome="error", error="Overloaded")
    assert_error(
        other_client.post("/api/memory/agents/coder/promote", {"entry_id": entry.pk}, format="json"), 404, "not_found"
    )
    response = owner_client.post("/api/memory/agents/coder/promote", {"entry_id": entry.pk}, format="json")
    assert response.status_code == 200
    assert "Overloaded" in response.json()["content"]
    again = owner_client.post("/api/memory/agents/coder/promote", {"entry_id": entry.pk}, format="json")
    assert_error(again, 409, "conflict")
    text = owner_client.post("/api/memory/agents/coder/promote", {"text": "A lesson"}, format="json")
    assert "A lesson" in text.json()["content"]


@pytest.mark.parametrize("body", [{}, {"entry_id": 1, "text": "both"}, {"entry_id": "x"}])
def test_promote_bad_input(owner_client, body) -> None:
    assert field_errors(owner_client.post("/api/memory/agents/coder/promote", body, format="json"))


def test_daily_log(owner, other_user, owner_client) -> None:
    today = timezone.localdate().isoformat()
    _entry(owner, output_context_id="ctx_a", input_context_ids=["ctx_0"])
    _entry(owner, session="run-8", outcome="invalid", error="bad")
    _entry(owner, agent_id="planner")
    _entry(other_user)
    body = owner_client.get(f"/api/memory/agents/coder/daily/{today}").json()
    assert body["agent_id"] == "coder" and body["date"] == today
    assert [(e["session"], e["status"]) for e in body["entries"]] == [("run-7", "ok"), ("run-8", "error")]
    assert body["entries"][0]["input_context_ids"] == ["ctx_0"]
    assert body["entries"][0]["output_context_id"] == "ctx_a"
    md = owner_client.get(f"/api/memory/agents/coder/daily/{today}", {"format": "markdown"})
    assert md["Content-Type"].startswith("text/markdown")
    assert "## run-7" in md.content.decode() and "Invalid output: bad" in md.content.decode()
    assert owner_client.get("/api/memory/agents/coder/daily/2001-01-01").json()["entries"] == []


@pytest.mark.parametrize("day", ["yesterday", "2026-13-01", "2026-02-30"])
def test_daily_log_bad_date(owner_client, day) -> None:
    assert "date" in field_errors(owner_client.get(f"/api/memory/agents/coder/daily/{day}"))


def test_anonymous_gets_401(anon_client) -> None:
    for response in (
        anon_client.get("/api/memory/agents/coder/notes"),
        anon_client.post("/api/memory/agents/coder/notes", {"text": "x"}, format="json"),
        anon_client.post("/api/memory/agents/coder/promote", {"text": "x"}, format="json"),
        anon_client.get("/api/memory/agents/coder/daily/2026-01-01"),
    ):
        assert response.status_code == 401


# --- Pages ------------------------------------------------------------------------------


def test_agents_page_lists_only_own_agents(owner, other_user, client) -> None:
    notes_append(owner=owner, agent_id="coder", text="x")
    _entry(owner, agent_id="reviewer")
    notes_append(owner=other_user, agent_id="secret-agent", text="x")
    client.force_login(owner)
    html = client.get("/memory/agents/").content.decode()
    assert "/memory/agents/coder/" in html and "/memory/agents/reviewer/" in html
    assert "secret-agent" not in html


def test_agent_page_renders_notes_safely_with_todays_log(owner, client) -> None:
    notes_append(owner=owner, agent_id="coder", text="# Title\n\n- item **bold**\n\n<script>alert(1)</script>")
    _entry(owner, outcome="error", error="Overloaded now")
    client.force_login(owner)
    response = client.get("/memory/agents/coder/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "<li>item <strong>bold</strong></li>" in html
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert "Overloaded now" in html and 'href="/memory/runs/7/lineage"' in html
    assert "memory_notes.css" in html


def test_agent_page_shows_other_sessions_and_days(owner, client) -> None:
    _entry(owner, session="chat-3")
    client.force_login(owner)
    html = client.get("/memory/agents/coder/").content.decode()
    assert "chat-3" in html and "/memory/runs/" not in html
    assert "Nothing logged" in client.get("/memory/agents/coder/?date=2001-01-01").content.decode()
    assert client.get("/memory/agents/coder/?date=garbage").status_code == 200


def test_agent_page_append_and_promote(owner, other_user, client) -> None:
    entry = _entry(owner)
    client.force_login(owner)
    response = client.post("/memory/agents/coder/append", {"text": "From the page"})
    assert response.status_code == 302 and response["Location"] == "/memory/agents/coder/"
    assert "From the page" in AgentNote.objects.get(owner=owner).content
    response = client.post(f"/memory/agents/coder/promote/{entry.pk}", {"date": "2026-01-02"})
    assert response.status_code == 302 and response["Location"] == "/memory/agents/coder/?date=2026-01-02"
    entry.refresh_from_db()
    assert entry.promoted
    client.force_login(other_user)
    other = _entry(owner)
    assert client.post(f"/memory/agents/coder/promote/{other.pk}").status_code == 404
    other.refresh_from_db()
    assert not other.promoted
    assert "From the page" not in client.get("/memory/agents/coder/").content.decode()


def test_pages_need_login(client) -> None:
    for url in ("/memory/agents/", "/memory/agents/coder/", "/memory/runs/1/lineage"):
        response = client.get(url)
        assert response.status_code == 302 and "login" in response["Location"]
    assert client.post("/memory/agents/coder/append", {"text": "x"}).status_code == 302
    assert not AgentNote.objects.exists()


def test_a_markdown_export_of_an_odd_agent_id_has_a_safe_file_name(owner_client) -> None:
    # A newline and a quote in the URL's agent id (the fuzzer's find: Django refused to
    # send a header with a newline, a 500).
    response = owner_client.get("/api/memory/agents/co%0Ader%22x/notes?format=markdown")
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'inline; filename="co_der_x-notes.md"'
