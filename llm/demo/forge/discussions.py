"""GitLab's side of reviews on the fake forge: a merge request's discussions (a DiffNote per
line comment, with ``position``; a review's body a note of its own), a note added to a
discussion, and a project's members with their access level."""

from __future__ import annotations

from typing import Any

from .answers import Answer, ForgeRequest, forbidden, not_found
from .review_state import FakeReviewComment, ReviewState, pull_key, reviews_state, token_login, user_answer


def _gitlab_note(data: ReviewState, note_id: int, author: str, body: str, **extra: Any) -> dict[str, Any]:
    return {"id": note_id, "body": body, "author": user_answer(data, author, "gitlab"), "system": False, **extra}


def _discussions(request: ForgeRequest) -> Answer:
    key = pull_key(request)
    if key is None:
        return not_found(request.kind)
    data = reviews_state(request.forge)
    found = []
    for note_id, author, body in data.notes.get(key, []):
        found.append(
            {"id": f"n{note_id:08x}", "individual_note": True, "notes": [_gitlab_note(data, note_id, author, body)]}
        )
    threads: dict[str, list[FakeReviewComment]] = {}
    for comment in data.comments.get(key, []):
        threads.setdefault(comment.discussion_id, []).append(comment)
    for discussion_id, comments in threads.items():
        notes = [
            _gitlab_note(data, c.id, c.author, c.body, type="DiffNote", position=note_position(c), resolvable=True)
            for c in comments
        ]
        found.append({"id": discussion_id, "individual_note": False, "notes": notes})
    return 200, found


def note_position(comment: FakeReviewComment) -> dict[str, Any]:
    side = "old" if comment.side == "LEFT" else "new"
    line = (
        {"new_line": comment.line, "old_line": None} if side == "new" else {"new_line": None, "old_line": comment.line}
    )
    position: dict[str, Any] = {"position_type": "text", "new_path": comment.path, "old_path": comment.path, **line}
    if comment.start_line:
        start = {f"{side}_line": comment.start_line, "type": side}
        position["line_range"] = {"start": start, "end": {f"{side}_line": comment.line, "type": side}}
    return position


def _discussion_note(request: ForgeRequest) -> Answer:
    key = pull_key(request)
    if key is None:
        return not_found(request.kind)
    if not request.may_write:
        return forbidden(request.kind)
    data = reviews_state(request.forge)
    thread = [c for c in data.comments.get(key, []) if c.discussion_id == request.match["discussion"]]
    if not thread:
        return not_found(request.kind)
    first = thread[0]
    reply = FakeReviewComment(
        id=next(data.ids),
        review_id=0,
        author=token_login(request.forge, request.token),
        path=first.path,
        line=first.line,
        start_line=first.start_line,
        side=first.side,
        body=str(request.body.get("body", "")),
        discussion_id=first.discussion_id,
    )
    data.comments[key].append(reply)
    return 201, _gitlab_note(data, reply.id, reply.author, reply.body, type="DiffNote")


def _member(request: ForgeRequest) -> Answer:
    assert request.repository is not None
    data = reviews_state(request.forge)
    user_id = int(request.match["user_id"])
    login = next((name for name, uid in data.user_ids.items() if uid == user_id), None)
    levels = {"admin": 50, "maintain": 40, "write": 30, "read": 20}
    permission = data.collaborators.get(request.repository.name, {}).get(login or "")
    if login is None or permission is None:
        return not_found(request.kind)
    return 200, {"id": user_id, "username": login, "access_level": levels.get(permission, 10)}


MR = r"/projects/(?P<repo>[^/]+)/merge_requests/(?P<number>\d+)"

ROUTES = [
    ("gitlab", "GET", MR + r"/discussions", _discussions),
    ("gitlab", "POST", MR + r"/discussions/(?P<discussion>[^/]+)/notes", _discussion_note),
    ("gitlab", "GET", r"/projects/(?P<repo>[^/]+)/members/all/(?P<user_id>\d+)", _member),
]
CONTROLS: dict[str, Any] = {}
