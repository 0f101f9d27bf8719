"""Pages of agent notes and daily logs: thin views over memory.services.notes /
memory.selectors."""

from __future__ import annotations

import re
from datetime import date

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET, require_POST

from accounts.selectors import request_user
from core.exceptions import ApplicationError, NotFound
from memory.selectors.notes import (
    daily_log_for_user,
    daily_log_session_page,
    daily_log_sessions,
    notes_agents_for_user,
    notes_get_for_user,
    notes_list_for_user,
)
from memory.services.notes import notes_append, notes_promote

AGENT_ID_MAX = 50
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def _inline(text: str) -> str:
    return _CODE.sub(r"<code>\1</code>", _BOLD.sub(r"<strong>\1</strong>", text))


def render_markdown(text: str) -> SafeString:
    """A minimal, safe subset: the text is escaped first, then headings, bullet lists,
    bold, inline code and paragraphs become HTML. Nothing else is interpreted."""
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


@login_required
@require_GET
def agent_list(request: HttpRequest) -> HttpResponse:
    notes = {note.agent_id: note for note in notes_list_for_user(user=request_user(request))}
    agents = [
        {"agent_id": agent_id, "note": notes.get(agent_id)}
        for agent_id in notes_agents_for_user(user=request_user(request))
    ]
    return render(request, "memory/notes_agents.html", {"agents": agents})


@login_required
@require_GET
def agent_detail(request: HttpRequest, agent_id: str) -> HttpResponse:
    agent_id = _agent_id(agent_id)
    try:
        day = date.fromisoformat(request.GET["date"]) if request.GET.get("date") else timezone.localdate()
    except ValueError:
        day = timezone.localdate()
    user = request_user(request)
    note = notes_get_for_user(user=user, agent_id=agent_id)
    entries = list(daily_log_for_user(user=user, agent_id=agent_id, day=day))
    context = {
        "agent_id": agent_id,
        "note": note,
        "notes_html": render_markdown(note.content) if note else "",
        "day": day,
        "sessions": [
            {**group, "lineage_url": _lineage_url(str(group["session"]))} for group in daily_log_sessions(entries)
        ],
        "entry_count": len(entries),
    }
    return render(request, "memory/notes_agent.html", context)


@login_required
@require_POST
def agent_append(request: HttpRequest, agent_id: str) -> HttpResponse:
    agent_id = _agent_id(agent_id)
    text = request.POST.get("text", "")
    try:
        notes_append(owner=request_user(request), agent_id=agent_id, text=text[:20_000])
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    else:
        messages.success(request, "Added to the notes.")
    return redirect("memory:notes-agent", agent_id=agent_id)


@login_required
@require_POST
def agent_promote(request: HttpRequest, agent_id: str, entry_id: int) -> HttpResponse:
    agent_id = _agent_id(agent_id)
    try:
        notes_promote(owner=request_user(request), agent_id=agent_id, entry_id=entry_id)
    except NotFound:
        raise  # the 404 page (core.middleware.NotFoundMiddleware), not a message
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Promoted into the notes.")
    day = request.POST.get("date", "")
    suffix = f"?date={day}" if re.fullmatch(r"\d{4}-\d{2}-\d{2}", day) else ""
    return redirect(f"{request.path.rsplit('/promote/', 1)[0]}/{suffix}")
