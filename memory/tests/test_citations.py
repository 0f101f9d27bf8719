"""Memories that cite code: a citation checked against a file (holds, moved, changed,
gone), a memory about some files recalled only for a task touching them, a memory whose
code is gone marked stale and never recalled, and a person making one project-wide."""

from __future__ import annotations

import pytest

from memory.citations import (
    CitationStatus,
    citation_check,
    citation_of_file,
    citation_of_lines,
    citation_of_quote,
    citations_from_json,
)
from memory.models.semantic import DecayPolicy, Memory
from memory.selectors.semantic import memory_recall
from memory.services.citations import memory_citations_land, memory_citations_verify, memory_generalise
from memory.services.semantic import memory_create, memory_reinforce_many

pytestmark = pytest.mark.django_db

FILE = "".join(f"line_{n} = {n}\n" for n in range(1, 21))
LESSON = "Name the numbers in long.py with words, never with digits"
QUERY = "Rename the constants of the numbers module"


def _lines(*numbers: int) -> str:
    return "".join(f"line_{n} = {n}\n" for n in numbers)


# --- the check, on text -----------------------------------------------------------------------


def test_a_citation_holds_where_its_text_still_is() -> None:
    cited = citation_of_lines(path="app/long.py", start=7, end=8, file_text=FILE, commit="a" * 40)
    assert (cited.start, cited.end, cited.text) == (7, 8, "line_7 = 7\nline_8 = 8")
    check = citation_check(cited, FILE, commit="b" * 40)
    assert check.status == CitationStatus.HOLDS
    assert (check.citation.start, check.citation.commit) == (7, "b" * 40)


def test_a_citation_follows_its_text_when_lines_are_added_above() -> None:
    cited = citation_of_lines(path="app/long.py", start=7, end=8, file_text=FILE, commit="a" * 40)
    moved = "import os\n\n\n" + FILE
    check = citation_check(cited, moved, commit="b" * 40)
    assert check.status == CitationStatus.MOVED
    assert (check.citation.start, check.citation.end) == (10, 11)
    assert check.citation.hash == cited.hash


def test_a_citation_of_edited_lines_is_re_anchored_to_the_lines_most_like_them() -> None:
    cited = citation_of_quote(
        path="app/long.py", start=7, end=7, quote="total = price * quantity  # the order's total", commit="a" * 40
    )
    edited = _lines(1, 2) + "total = price * quantity * (1 - discount)  # the order's total\n" + _lines(3, 4)
    check = citation_check(cited, edited, commit="b" * 40)
    assert check.status == CitationStatus.CHANGED
    assert (check.citation.start, check.citation.end) == (3, 3)
    assert "discount" in check.citation.text


def test_a_citation_is_gone_when_its_file_is_or_nothing_like_its_text_is_left() -> None:
    cited = citation_of_lines(path="app/long.py", start=7, end=8, file_text=FILE, commit="a" * 40)
    assert citation_check(cited, None, commit="b" * 40).status == CitationStatus.GONE
    assert citation_check(cited, "def main():\n    return 0\n", commit="b" * 40).status == CitationStatus.GONE


def test_a_citation_of_a_whole_file_holds_while_the_file_exists() -> None:
    cited = citation_of_file(path="app/long.py", commit="a" * 40)
    assert citation_check(cited, "anything\n", commit="b" * 40).status == CitationStatus.HOLDS
    assert citation_check(cited, None, commit="b" * 40).status == CitationStatus.GONE


def test_lines_past_the_end_are_clipped_and_none_at_all_cite_the_file() -> None:
    clipped = citation_of_lines(path="a.py", start=19, end=40, file_text=FILE, commit="c")
    assert (clipped.start, clipped.end) == (19, 20)
    assert citation_of_lines(path="a.py", start=30, end=40, file_text=FILE, commit="c").whole_file


# --- memories ----------------------------------------------------------------------------------


def cited_memory(owner, project, *, path: str = "app/long.py", start: int = 7, commit: str = "a" * 40) -> Memory:
    citation = citation_of_lines(path=path, start=start, end=start, file_text=FILE, commit=commit)
    write = memory_create(
        owner=owner, content=LESSON, project=project, agent="coder", citations=[citation], path_scoped=True
    )
    return write.memory


def recalled(owner, project, paths=()) -> list[int]:
    found = memory_recall(user=owner, project=project, agent="coder", query=QUERY, paths=paths, min_score=0.99)
    return [result.memory.pk for result in found]


def test_a_memory_about_a_file_is_recalled_for_a_task_touching_it_and_not_otherwise(owner, project) -> None:
    memory = cited_memory(owner, project)
    assert list(memory.cited_path_rows.values_list("path", "name")) == [("app/long.py", "long.py")]
    # min_score 0.99: found by its file, not by its words.
    assert recalled(owner, project, paths={"app/long.py"}) == [memory.pk]
    assert recalled(owner, project, paths={"long.py"}) == [memory.pk]  # as a task's text names it
    assert recalled(owner, project, paths={"app/short.py"}) == []
    assert recalled(owner, project, paths={"app/long.pyc", "app"}) == []
    assert memory_recall(user=owner, project=project, agent="coder", query=LESSON, min_score=0.0) == []


def test_a_memory_for_the_whole_project_is_recalled_whatever_the_files(owner, project) -> None:
    general = memory_create(owner=owner, content=LESSON, project=project, agent="coder").memory
    found = memory_recall(user=owner, project=project, agent="coder", query=LESSON, paths={"b.py"})
    assert [result.memory.pk for result in found] == [general.pk]
    assert not found[0].path_match


def test_learned_again_without_a_file_a_lesson_becomes_the_whole_projects(owner, project) -> None:
    memory = cited_memory(owner, project)
    again = memory_create(owner=owner, content=LESSON, project=project, agent="coder")
    assert again.memory.pk == memory.pk
    assert again.memory.path_scoped is False
    elsewhere = citation_of_file(path="app/other.py", commit="b" * 40)
    memory_create(owner=owner, content=LESSON, project=project, agent="coder", citations=[elsewhere], path_scoped=True)
    memory.refresh_from_db()
    assert [c.path for c in citations_from_json(memory.citations)] == ["app/long.py", "app/other.py"]
    assert memory.path_scoped is False


def _verify(owner, memory: Memory, files: dict[str, str | None], *, contains: bool = True) -> str:
    return memory_citations_verify(
        owner=owner,
        memories=[memory],
        commit="f" * 40,
        read_files=lambda paths: {path: files.get(path) for path in paths},
        contains=lambda commit: contains,
    )[memory.pk]


def test_a_memory_whose_code_moved_is_re_anchored(owner, project) -> None:
    memory = cited_memory(owner, project)
    assert _verify(owner, memory, {"app/long.py": "# header\n" + FILE}) == CitationStatus.MOVED
    memory.refresh_from_db()
    (citation,) = citations_from_json(memory.citations)
    assert (citation.start, citation.commit) == (8, "f" * 40)
    assert memory.checked_commit == "f" * 40 and memory.stale_at is None
    assert recalled(owner, project, paths={"app/long.py"}) == [memory.pk]


def test_a_memory_whose_file_is_gone_is_stale_and_never_recalled(owner, project) -> None:
    memory = cited_memory(owner, project)
    assert _verify(owner, memory, {}) == CitationStatus.GONE
    memory.refresh_from_db()
    assert memory.stale_at is not None
    assert "app/long.py line 7 (file gone)" in memory.stale_reason and "ffffffffff" in memory.stale_reason
    assert recalled(owner, project, paths={"app/long.py"}) == []
    # A run that was given it before cannot renew it now.
    assert memory_reinforce_many(owner=owner, memory_ids=[memory.pk]) == 0


def test_gone_from_a_commit_that_lacks_the_cited_one_tells_nothing(owner, project) -> None:
    memory = cited_memory(owner, project)
    assert _verify(owner, memory, {}, contains=False) == CitationStatus.UNVERIFIED
    memory.refresh_from_db()
    assert memory.stale_at is None and memory.checked_commit == ""
    assert recalled(owner, project, paths={"app/long.py"}) == [memory.pk]


def test_checked_once_per_commit(owner, project) -> None:
    memory = cited_memory(owner, project)
    reads: list[set[str]] = []

    def read(paths: set[str]) -> dict[str, str | None]:
        reads.append(paths)
        return dict.fromkeys(paths, FILE)

    for _ in range(2):
        memory.refresh_from_db()
        memory_citations_verify(owner=owner, memories=[memory], commit="f" * 40, read_files=read, contains=bool)
    assert reads == [{"app/long.py"}]


def test_a_person_makes_a_stale_memory_the_whole_projects_again(owner, project) -> None:
    memory = cited_memory(owner, project)
    _verify(owner, memory, {})
    generalised = memory_generalise(owner=owner, memory_id=memory.pk)
    assert generalised.stale_at is None and generalised.path_scoped is False and generalised.citations == []
    found = memory_recall(user=owner, project=project, agent="coder", query=LESSON, paths={"b.py"})
    assert [result.memory.pk for result in found] == [memory.pk]


def test_on_approval_citations_move_to_the_code_that_landed(owner, project) -> None:
    kept = cited_memory(owner, project, start=7)
    code = "def discount(order):\n    return order.total * Decimal('0.1')\n"
    quote = citation_of_quote(path="app/long.py", start=21, end=22, quote=code, commit="a" * 40)
    removed_lines = memory_create(
        owner=owner, content="Discounts are Decimals", project=project, citations=[quote], path_scoped=True
    ).memory
    gone_file = citation_of_file(path="app/gone.py", commit="a" * 40)
    removed_file = memory_create(
        owner=owner, content="Gone files are never imported", project=project, citations=[gone_file], path_scoped=True
    ).memory
    landed = "# header\n" + FILE  # the discount function is not there any more
    memory_citations_land(
        owner=owner,
        memory_ids=[kept.pk, removed_lines.pk, removed_file.pk],
        commit="e" * 40,
        read_files=lambda paths: {path: landed if path == "app/long.py" else None for path in paths},
    )
    for memory in (kept, removed_lines, removed_file):
        memory.refresh_from_db()
    (moved,) = citations_from_json(kept.citations)
    assert (moved.start, moved.commit) == (8, "e" * 40)
    (whole,) = citations_from_json(removed_lines.citations)
    assert whole.whole_file and whole.path == "app/long.py" and removed_lines.path_scoped
    assert removed_file.citations == [] and removed_file.path_scoped is False
    assert kept.decay_policy == DecayPolicy.REINFORCEABLE


def test_generalise_over_the_api_is_the_owners_only_and_not_for_a_deleted_memory(
    owner, project, owner_client, other_client
) -> None:
    memory = cited_memory(owner, project)
    url = f"/api/memory/memories/{memory.pk}/generalise"
    assert other_client.post(url).status_code == 404
    memory.refresh_from_db()
    assert memory.path_scoped is True
    shown = owner_client.get(f"/api/memory/memories/{memory.pk}").json()
    assert shown["path_scoped"] is True and shown["stale"] is False
    assert [(c["path"], c["start"]) for c in shown["citations"]] == [("app/long.py", 7)]
    answer = owner_client.post(url)
    assert answer.status_code == 200 and answer.json()["path_scoped"] is False
    owner_client.delete(f"/api/memory/memories/{memory.pk}")
    refused = owner_client.post(url)
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_operation"
    assert owner_client.post("/api/memory/memories/999999/generalise").status_code == 404


def test_a_stale_memory_cannot_be_reinforced_and_the_page_does_not_offer_it(
    owner, project, owner_client, owner_session_client
) -> None:
    memory = cited_memory(owner, project)
    _verify(owner, memory, {})
    refused = owner_client.post(f"/api/memory/memories/{memory.pk}/reinforce")
    assert refused.status_code == 400 and "stale" in refused.json()["message"]
    memory.refresh_from_db()
    assert memory.reinforce_count == 0
    page = owner_session_client.get("/memory/recall").content.decode()
    assert "Stale" in page and "Reinforce memory:" not in page


def test_edit_over_the_api_is_partial(owner, project, owner_client) -> None:
    memory = cited_memory(owner, project)
    url = f"/api/memory/memories/{memory.pk}"
    line = owner_client.patch(url, {"applies_when": "changing the numbers module"}, format="json")
    assert line.status_code == 200, line.json()
    assert (line.json()["content"], line.json()["applies_when"]) == (LESSON, "changing the numbers module")
    empty = owner_client.patch(url, {}, format="json")
    assert empty.status_code == 400 and "content" in empty.json()["extra"]["fields"]


def test_the_pages_buttons_generalise_share_and_refuse_with_a_message(owner, project, other_user) -> None:
    from django.test import Client

    memory = cited_memory(owner, project)
    browser = Client()
    browser.force_login(owner)
    assert browser.post(f"/memory/recall/{memory.pk}/share", {"shared": "1"}).status_code == 302
    assert browser.post(f"/memory/recall/{memory.pk}/generalise").status_code == 302
    memory.refresh_from_db()
    assert memory.is_global is True and memory.path_scoped is False
    browser.post(f"/memory/recall/{memory.pk}/delete")
    refused = browser.post(f"/memory/recall/{memory.pk}/pin", {"pinned": "1"}, follow=True)
    assert "A deleted memory cannot be pinned" in refused.content.decode()
    stranger = Client()
    stranger.force_login(other_user)
    assert stranger.post(f"/memory/recall/{memory.pk}/share", {"shared": "0"}).status_code == 404
