"""Pages of agent notes and daily logs: thin views over memory.services.notes /
memory.selectors."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET, require_POST

from accounts.models import User
from accounts.selectors import request_user
from core.exceptions import ApplicationError, NotFound
from memory.forms.notes import NotesPlaceForm
from memory.models import AgentNote
from memory.references import MEMORY_REFERENCE, referenced_memory_ids
from memory.selectors.notes import (
    DELETED_MEMORY,
    daily_log_for_user,
    daily_log_session_page,
    daily_log_sessions,
    notes_agents_for_user,
    notes_list_for_user,
    notes_memories_live,
    notes_of_agent_for_user,
)
from memory.services.notes import notes_append, notes_promote
from projects.models import Project
from projects.selectors import project_get_for_user, project_list_for_user

AGENT_ID_MAX = 50
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")


ReferenceHtml = Callable[[int], str]


def render_markdown(text: str, reference_html: ReferenceHtml | None = None) -> SafeString:
    """A minimal, safe subset: the text is escaped first, then headings, bullet lists,
    bold, inline code and paragraphs become HTML. Nothing else is interpreted, but a
    reference to a memory (memory.references) becomes ``reference_html(id)`` — HTML the
    caller builds safe — when given."""

    def _inline(line: str) -> str:
        line = _CODE.sub(r"<code>\1</code>", _BOLD.sub(r"<strong>\1</strong>", line))
        if reference_html is None:
            return line
        return MEMORY_REFERENCE.sub(lambda found: reference_html(int(found.group(1))), line)

    html: list[str] = []
    paragraph: list[str] = []
    in_list = False

    def flush() -> None:
        nonlocal in_list
        if paragraph:
            html.append("<p>" + "<br>".join(paragraph) + "</p>")
            paragraph.clear()
        if in_list:
            html.append("</ul>")
            in_list = False

    for raw in escape(text).splitlines():
        line = raw.rstrip()
        if heading := _HEADING.match(line):
            flush()
            level = min(len(heading.group(1)) + 1, 6)  # the page's own h1 stays the only one
            html.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif line.lstrip().startswith(("- ", "* ")):
            if paragraph:
                html.append("<p>" + "<br>".join(paragraph) + "</p>")
                paragraph.clear()
            if not in_list:
                html.append("<ul>")
                in_list = True
            html.append(f"<li>{_inline(line.lstrip()[2:])}</li>")
        elif not line.strip():
            flush()
        else:
            if in_list:
                html.append("</ul>")
                in_list = False
            paragraph.append(_inline(line))
    flush()
    return mark_safe("\n".join(html))  # noqa: S308 - built from escaped text only


def _lineage_url(session: str) -> str:
    """The page of a session's context lineage (a run's), registered by the app it is of."""
    page = daily_log_session_page(session)
    return reverse(page[0], args=[page[1]]) if page else ""


def _agent_id(agent_id: str) -> str:
    if len(agent_id) > AGENT_ID_MAX:
        raise Http404("No such agent.")
    return agent_id


def _reference_html(memories: dict[int, str]) -> ReferenceHtml:
    """A reference as the memory's text now, linked to it on the Memories page; a deleted
    or faded one struck out, its text not shown."""
    recall_url = reverse("memory:recall")

    def html(memory_id: int) -> str:
        if memory_id not in memories:
            return f'<del class="notes-memory-gone" title="Memory {memory_id}">{escape(DELETED_MEMORY)}</del>'
        content = memories[memory_id]
        url = f"{recall_url}?{urlencode({'q': content[:200]})}"
        return f'<a class="notes-memory" href="{escape(url)}" title="Open on the Memories page">“{escape(content)}”</a>'

    return html


def _notes_html(owner: User, note: AgentNote) -> SafeString:
    memories = notes_memories_live(owner=owner, memory_ids=referenced_memory_ids(note.content), project=note.project)
    return render_markdown(note.content, _reference_html(memories))


@login_required
@require_GET
def agent_list(request: HttpRequest) -> HttpResponse:
    user = request_user(request)
    notes: dict[str, list[AgentNote]] = {}
    for note in notes_list_for_user(user=user):
        notes.setdefault(note.agent_id, []).append(note)
    agents = []
    for agent_id in notes_agents_for_user(user=user):
        agent_notes = notes.get(agent_id, [])
        agents.append(
            {
                "agent_id": agent_id,
                "chars": sum(len(note.content) for note in agent_notes),
                "updated_at": max((note.updated_at for note in agent_notes), default=None),
                "revision_count": sum(note.revision_count for note in agent_notes),  # type: ignore[attr-defined]
                "project_count": sum(1 for note in agent_notes if note.project_id is not None),
                "has_notes": bool(agent_notes),
            }
        )
    return render(request, "memory/notes_agents.html", {"agents": agents})


def _agent_page(request: HttpRequest, agent_id: str, *, place_error: str = "", status: int = 200) -> HttpResponse:
    try:
        day = date.fromisoformat(request.GET["date"]) if request.GET.get("date") else timezone.localdate()
    except ValueError:
        day = timezone.localdate()
    user = request_user(request)
    notes = notes_of_agent_for_user(user=user, agent_id=agent_id)
    global_note = next((note for note in notes if note.project_id is None), None)
    entries = list(daily_log_for_user(user=user, agent_id=agent_id, day=day))
    context = {
        "agent_id": agent_id,
        "global_note": global_note,
        "global_html": _notes_html(user, global_note) if global_note else "",
        "project_notes": [
            {"note": note, "html": _notes_html(user, note)} for note in notes if note.project_id is not None
        ],
        "projects": list(project_list_for_user(user=user).order_by("name")),
        "place_error": place_error,
        "day": day,
        "sessions": [
            {**group, "lineage_url": _lineage_url(str(group["session"]))} for group in daily_log_sessions(entries)
        ],
        "entry_count": len(entries),
    }
    return render(request, "memory/notes_agent.html", context, status=status)


@login_required
@require_GET
def agent_detail(request: HttpRequest, agent_id: str) -> HttpResponse:
    return _agent_page(request, _agent_id(agent_id))


class _BadPlace(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


def _posted_project(request: HttpRequest) -> Project | None:
    """The project the form names (None: the notes for every project); a bad value is
    _BadPlace, a project not the user's NotFound (a 404)."""
    form = NotesPlaceForm(request.POST)
    if not form.is_valid():
        raise _BadPlace(" ".join(str(error) for error in form.errors.get("project", [])) or "Choose a project.")
    project_id = form.cleaned_data.get("project")
    return None if project_id is None else project_get_for_user(user=request_user(request), project_id=project_id)


@login_required
@require_POST
def agent_append(request: HttpRequest, agent_id: str) -> HttpResponse:
    agent_id = _agent_id(agent_id)
    text = request.POST.get("text", "")
    try:
        project = _posted_project(request)
    except _BadPlace as exc:
        return _agent_page(request, agent_id, place_error=exc.message, status=400)
    try:
        notes_append(owner=request_user(request), agent_id=agent_id, text=text[:20_000], project=project)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, f"Added to the notes for {project.name if project else 'every project'}.")
    return redirect("memory:notes-agent", agent_id=agent_id)


@login_required
@require_POST
def agent_promote(request: HttpRequest, agent_id: str, entry_id: int) -> HttpResponse:
    agent_id = _agent_id(agent_id)
    try:
        project = _posted_project(request)
    except _BadPlace as exc:
        return _agent_page(request, agent_id, place_error=exc.message, status=400)
    try:
        notes_promote(owner=request_user(request), agent_id=agent_id, entry_id=entry_id, project=project)
    except NotFound:
        raise  # the 404 page (core.middleware.NotFoundMiddleware), not a message
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Promoted into the notes.")
    day = request.POST.get("date", "")
    suffix = f"?date={day}" if re.fullmatch(r"\d{4}-\d{2}-\d{2}", day) else ""
    return redirect(f"{request.path.rsplit('/promote/', 1)[0]}/{suffix}")
