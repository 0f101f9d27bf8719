"""Agent notes and daily logs over REST and as pages, with personas."""

from __future__ import annotations

import pytest
from django.utils import timezone
from django.utils.html import escape

from memory.models import AgentNote, AgentNoteRevision
from memory.services.notes import daily_log_record, notes_append
from memory.services.semantic import memory_create, memory_delete
from tests.api_helpers import assert_error, field_errors
from tests.factories import ProjectFactory

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
    assert empty.json() == {
        "agent_id": "coder",
        "project": None,
        "content": "",
        "references": [],
        "updated_at": None,
        "revisions": 0,
    }
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


# --- Notes per project, references to memories ------------------------------------------------


def test_a_projects_notes_over_the_api_apart_from_the_global_ones(owner, project, owner_client) -> None:
    url = "/api/memory/agents/coder/notes"
    created = owner_client.post(url, {"text": "Orders use cursors.", "project": project.pk}, format="json")
    assert created.status_code == 201 and created.json()["project"] == project.pk
    owner_client.post(url, {"text": "Keep commits small."}, format="json")
    in_project = owner_client.get(url, {"project": project.pk}).json()
    assert "Orders use cursors." in in_project["content"] and "Keep commits small." not in in_project["content"]
    everywhere = owner_client.get(url).json()
    assert everywhere["project"] is None
    assert "Keep commits small." in everywhere["content"] and "Orders use cursors." not in everywhere["content"]
    promoted = owner_client.post(
        "/api/memory/agents/coder/promote", {"text": "A lesson", "project": project.pk}, format="json"
    )
    assert promoted.status_code == 200 and "A lesson" in promoted.json()["content"]
    assert AgentNote.objects.filter(owner=owner, agent_id="coder").count() == 2


def test_references_are_listed_with_the_memorys_text_now_and_exported_as_it(owner, project, owner_client) -> None:
    kept = memory_create(owner=owner, content="Name fields in snake_case", project=project)[0]
    gone = memory_create(owner=owner, content="A lesson taken back", project=project)[0]
    memory_delete(owner=owner, memory_id=gone.pk)
    notes_append(
        owner=owner,
        agent_id="coder",
        project=project,
        text=f"- Learned: [memory:{kept.pk}]\n- Learned: [memory:{gone.pk}]",
    )
    body = owner_client.get("/api/memory/agents/coder/notes", {"project": project.pk}).json()
    assert body["references"] == [
        {"id": kept.pk, "content": "Name fields in snake_case"},
        {"id": gone.pk, "content": None},
    ]
    export = owner_client.get("/api/memory/agents/coder/notes", {"project": project.pk, "format": "markdown"})
    text = export.content.decode()
    assert text.startswith(f"# Notes of coder in {project.name}")
    assert "- Learned: “Name fields in snake_case”" in text and "- Learned: ~~(memory deleted)~~" in text
    assert "A lesson taken back" not in text
    assert export["Content-Disposition"] == f'inline; filename="coder-project-{project.pk}-notes.md"'


def test_another_users_project_is_a_404(owner, other_user, owner_client) -> None:
    theirs = ProjectFactory(owner=other_user)
    url = "/api/memory/agents/coder/notes"
    assert_error(owner_client.get(url, {"project": theirs.pk}), 404, "not_found")
    assert_error(owner_client.get(url, {"project": 999_999}), 404, "not_found")
    assert_error(owner_client.post(url, {"text": "x", "project": theirs.pk}, format="json"), 404, "not_found")
    promote = owner_client.post("/api/memory/agents/coder/promote", {"text": "x", "project": theirs.pk}, format="json")
    assert_error(promote, 404, "not_found")
    assert not AgentNote.objects.exists()


@pytest.mark.parametrize("value", ["abc", "0", "-1", str(2**63), "1.5"])
def test_a_bad_project_is_a_400_with_its_field_error(owner_client, value) -> None:
    url = "/api/memory/agents/coder/notes"
    assert list(field_errors(owner_client.get(url, {"project": value}))) == ["project"]
    assert "project" in field_errors(owner_client.post(url, {"text": "x", "project": value}, format="json"))
    promote = owner_client.post("/api/memory/agents/coder/promote", {"text": "x", "project": value}, format="json")
    assert "project" in field_errors(promote)
    assert not AgentNote.objects.exists()


def test_the_page_shows_each_projects_notes_with_references_as_the_memorys_text(owner, project, client) -> None:
    lesson = memory_create(owner=owner, content="Name fields in <b>snake_case</b>", project=project)[0]
    gone = memory_create(owner=owner, content="A lesson taken back", project=project)[0]
    memory_delete(owner=owner, memory_id=gone.pk)
    notes_append(owner=owner, agent_id="coder", text="Hand-written for every project.")
    notes_append(
        owner=owner,
        agent_id="coder",
        project=project,
        text=f"- Learned: [memory:{lesson.pk}]\n- Learned: [memory:{gone.pk}]",
    )
    client.force_login(owner)
    html = client.get("/memory/agents/coder/").content.decode()
    assert "For every project" in html and "Hand-written for every project." in html
    start = html.index(f'data-testid="notes-project-{project.pk}"')
    section = html[start : html.index("</section>", start)]
    assert f"In {escape(project.name)}" in section
    assert "“Name fields in &lt;b&gt;snake_case&lt;/b&gt;”</a>" in section and "/memory/recall?q=" in section
    assert '<del class="notes-memory-gone"' in section and "(memory deleted)" in section
    assert "A lesson taken back" not in html and "[memory:" not in html
    assert f'<option value="{project.pk}">in {escape(project.name)}</option>' in html


def test_the_page_appends_and_promotes_where_it_is_told(owner, other_user, project, client) -> None:
    entry = _entry(owner)
    client.force_login(owner)
    response = client.post("/memory/agents/coder/append", {"text": "For the project", "project": str(project.pk)})
    assert response.status_code == 302
    assert "For the project" in AgentNote.objects.get(owner=owner, project=project).content
    assert client.post(f"/memory/agents/coder/promote/{entry.pk}", {"project": ""}).status_code == 302
    assert "changes in run-7" in AgentNote.objects.get(owner=owner, project__isnull=True).content

    theirs = ProjectFactory(owner=other_user)
    assert client.post("/memory/agents/coder/append", {"text": "x", "project": str(theirs.pk)}).status_code == 404
    bad = client.post("/memory/agents/coder/append", {"text": "x", "project": "abc"})
    assert bad.status_code == 400 and "Enter a whole number." in bad.content.decode()
    assert not AgentNote.objects.filter(project=theirs).exists()
    assert AgentNote.objects.filter(owner=owner).count() == 2
