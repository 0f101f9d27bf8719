"""The chat page: the conversation in progress, a box to write in, live replies.

Thin: reads through selectors, sends through the service. With JavaScript the page
sends over the API and streams replies over /ws/chat (static/js/chat.js); without it the
form posts here and the page shows the queue until the replies are in.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from accounts.models import User
from accounts.selectors import request_user
from chat.events import MESSAGE_TEMPLATE, chat_message_payload
from chat.selectors import chat_message_list, chat_session_current_open, chat_session_state
from chat.services import NEW_SESSION_COMMAND, ChatImage, chat_image_validate, chat_message_send
from core.converters import parse_id
from core.exceptions import ApplicationError
from projects.context_processors import get_current_project
from projects.models import Project
from projects.selectors import project_get_for_user, project_list_for_user

PAGE_MESSAGES = 100


def _project(user: User, raw: str | None) -> Project | None:
    return project_get_for_user(user=user, project_id=raw) if raw else None


def _shown(user: User, project: Project | None) -> list[dict[str, Any]]:
    """The newest messages of the conversation in progress, oldest first."""
    session = chat_session_current_open(user=user, project=project)
    if session is None:
        return []
    newest = chat_message_list(user=user, project=project, session=session).reverse()[:PAGE_MESSAGES]
    return [chat_message_payload(message) for message in reversed(list(newest))]


@login_required
@require_http_methods(["GET", "POST"])
def chat_page(request: HttpRequest) -> HttpResponse:
    user = request_user(request)
    chosen = request.GET.get("project", request.POST.get("project"))
    # No choice made: the project the rest of the site is on (the header's); "" is a
    # choice, the conversation that belongs to no project.
    project = get_current_project(request) if chosen is None else _project(user, chosen)
    url = reverse("chat:page") + f"?project={project.pk if project else ''}"
    if request.method == "POST":
        image: ChatImage | None = None
        try:
            upload = request.FILES.get("image")
            if upload is not None:
                limit = settings.CHAT_ATTACHMENT_MAX_BYTES
                image = chat_image_validate(data=upload.read(limit + 1), max_bytes=limit)
            chat_message_send(user=user, project=project, text=request.POST.get("text", ""), image=image)
        except ApplicationError as exc:
            messages.error(request, exc.message)
        return redirect(url)
    ws_path = "/ws/chat" + (f"?project={project.pk}" if project else "")
    return render(
        request,
        "chat/chat.html",
        {
            "project": project,
            "projects": project_list_for_user(user=user),
            "chat_messages": _shown(user, project),
            "state": chat_session_state(user=user, project=project),
            "ws_path": ws_path,
            "api_url": reverse("api:chat-messages"),
            "new_command": NEW_SESSION_COMMAND,
            "max_bytes": settings.CHAT_ATTACHMENT_MAX_BYTES,
        },
    )


@login_required
@require_http_methods(["GET"])
def chat_messages(request: HttpRequest) -> HttpResponse:
    """The page's message list (a reconnected page loads it again), or with ``?id=`` one
    message of the user's: the same partials the page renders."""
    user = request_user(request)
    project = _project(user, request.GET.get("project"))
    raw_id = request.GET.get("id")
    if raw_id is None:
        return render(request, "chat/_chat_messages.html", {"chat_messages": _shown(user, project)})
    message = chat_message_list(user=user, project=project, session=None).filter(pk=parse_id(raw_id) or 0).first()
    if message is None:
        raise Http404
    return render(request, MESSAGE_TEMPLATE, {"m": chat_message_payload(message)})
