"""Reviews on a pull request, as each forge serves them, read into one shape
(``ReviewInfo`` with its ``ReviewLineComment``s), and what AutoCoder says back:

- GitHub: ``GET /repos/{o}/{r}/pulls/{n}/reviews`` (state CHANGES_REQUESTED, COMMENTED …)
  and ``GET /repos/{o}/{r}/pulls/{n}/comments`` (each with ``pull_request_review_id``,
  ``path``, ``line``, ``start_line``, ``side`` RIGHT/LEFT); a reply is
  ``POST /repos/{o}/{r}/pulls/{n}/comments/{id}/replies``.
- Gitea/Forgejo: ``GET /repos/{o}/{r}/pulls/{n}/reviews`` (REQUEST_CHANGES, COMMENT …) and
  ``/reviews/{id}/comments`` (``position``: a new file's line, ``original_position``: an
  old one's); it has no reply endpoint, so a reply is an issue comment quoting the comment.
- GitLab: ``GET /projects/:id/merge_requests/:iid/discussions`` (DiffNote ``position``:
  new_path/old_path, new_line/old_line, ``line_range``); GitLab has no review object, so
  one person's notes found together are one review; a reply is a note in the discussion.

Who may write (``commenter_may_write``) and the token's own login (``own_login``) too.
Everything read here is untrusted input: bounded in size, never executed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from django.core.cache import cache

from .client import ForgeClient, GitLab
from .errors import ForgeError, ForgeKind

REVIEW_BODY_MAX_CHARS = 5_000
COMMENT_BODY_MAX_CHARS = 5_000
# A review's line comments taken at most (each goes into the Coder's prompt whole).
REVIEW_COMMENTS_MAX = 50
REPLY_MAX_CHARS = 3_000
OWN_LOGIN_CACHE_SECONDS = 3_600
# The states that ask for something: a review that only approves sends no round.
CHANGES_REQUESTED = "CHANGES_REQUESTED"
COMMENTED = "COMMENTED"
_STATES = {
    "CHANGES_REQUESTED": CHANGES_REQUESTED,
    "REQUEST_CHANGES": CHANGES_REQUESTED,  # Gitea
    "COMMENTED": COMMENTED,
    "COMMENT": COMMENTED,  # Gitea
}
WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write", "owner"})
GITLAB_DEVELOPER = 30


@dataclass(frozen=True)
class ReviewLineComment:
    comment_id: str
    # Where a reply goes: GitLab's discussion id; GitHub's and Gitea's comment id.
    thread_id: str
    path: str
    # None: the forge no longer places it on a line (outdated): read as text only.
    line_start: int | None
    line_end: int | None
    side: str  # "new" or "old"
    body: str


@dataclass(frozen=True)
class ReviewInfo:
    key: str
    author: str
    author_id: str
    state: str  # CHANGES_REQUESTED or COMMENTED
    body: str
    comments: tuple[ReviewLineComment, ...] = ()
    # Every comment of the forge's this review covers (GitLab: its notes).
    comment_ids: tuple[str, ...] = field(default=())


def _text(value: Any, limit: int) -> str:
    return str(value or "")[:limit]


def _int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _login(user: Any) -> tuple[str, str]:
    if not isinstance(user, Mapping):
        return "", ""
    return str(user.get("login") or user.get("username") or "")[:255], str(user.get("id") or "")[:64]


def _list(data: Any) -> list[Mapping[str, Any]]:
    return [item for item in data if isinstance(item, Mapping)] if isinstance(data, list) else []


def reviews_list(client: ForgeClient, number: int, *, seen: Collection[str] = ()) -> list[ReviewInfo]:
    """The reviews on pull request ``number`` that ask for something (changes requested
    or comments), oldest first, each with its line comments. ``seen``: GitLab's notes
    already read, left out of the reviews its new notes make."""
    if client.kind == ForgeKind.GITLAB:
        assert isinstance(client, GitLab)
        return _gitlab_reviews(client, number, seen)
    base = f"/repos/{client.repository}/pulls/{number}"
    reviews = client.call_pages(f"{base}/reviews")
    comments: list[Mapping[str, Any]] = []
    if client.kind == ForgeKind.GITHUB:
        comments = client.call_pages(f"{base}/comments")
    found = []
    for review in reviews:
        state = _STATES.get(str(review.get("state") or "").upper())
        review_id = str(review.get("id") or "")
        if state is None or not review_id:
            continue
        if client.kind == ForgeKind.GITHUB:
            mine = [c for c in comments if str(c.get("pull_request_review_id") or "") == review_id]
            lines = [_github_comment(c) for c in mine]
        else:
            mine = client.call_pages(f"{base}/reviews/{review_id}/comments")
            lines = [_gitea_comment(c) for c in mine]
        author, author_id = _login(review.get("user"))
        found.append(
            ReviewInfo(
                key=review_id,
                author=author,
                author_id=author_id,
                state=state,
                body=_text(review.get("body"), REVIEW_BODY_MAX_CHARS),
                comments=tuple(lines[:REVIEW_COMMENTS_MAX]),
                comment_ids=tuple(c.comment_id for c in lines),
            )
        )
    return found


def _github_comment(data: Mapping[str, Any]) -> ReviewLineComment:
    comment_id = str(data.get("id") or "")
    end = _int(data.get("line"))
    start = _int(data.get("start_line")) or end
    return ReviewLineComment(
        comment_id=comment_id,
        thread_id=comment_id,
        path=_text(data.get("path"), 1000),
        line_start=min(start, end) if start and end else None,
        line_end=end,
        side="old" if str(data.get("side") or "").upper() == "LEFT" else "new",
        body=_text(data.get("body"), COMMENT_BODY_MAX_CHARS),
    )


def _gitea_comment(data: Mapping[str, Any]) -> ReviewLineComment:
    comment_id = str(data.get("id") or "")
    new_line, old_line = _int(data.get("position")), _int(data.get("original_position"))
    line = new_line or old_line
    return ReviewLineComment(
        comment_id=comment_id,
        thread_id=comment_id,
        path=_text(data.get("path"), 1000),
        line_start=line,
        line_end=line,
        side="new" if new_line else "old",
        body=_text(data.get("body"), COMMENT_BODY_MAX_CHARS),
    )


def _gitlab_reviews(client: GitLab, number: int, seen: Collection[str]) -> list[ReviewInfo]:
    """Each person's notes, in the order they wrote them: a review per person (the
    caller keeps which notes it has seen; GitLab's "submit review" publishes them together)."""
    path = f"/projects/{client._project()}/merge_requests/{number}/discussions"
    by_author: dict[str, list[tuple[Mapping[str, Any], str]]] = {}
    for discussion in client.call_pages(path):
        for note in _list(discussion.get("notes")):
            if note.get("system") or str(note.get("id") or "") in seen:
                continue
            author, _ = _login(note.get("author"))
            by_author.setdefault(author, []).append((note, str(discussion.get("id") or "")))
    reviews = []
    for author, notes in by_author.items():
        _, author_id = _login(notes[0][0].get("author"))
        lines = [_gitlab_line(note, thread) for note, thread in notes if isinstance(note.get("position"), Mapping)]
        general = [_text(note.get("body"), REVIEW_BODY_MAX_CHARS) for note, _ in notes if not note.get("position")]
        reviews.append(
            ReviewInfo(
                key=f"note-{notes[0][0].get('id')}",
                author=author,
                author_id=author_id,
                state=COMMENTED,
                body="\n\n".join(general)[:REVIEW_BODY_MAX_CHARS],
                comments=tuple(lines[:REVIEW_COMMENTS_MAX]),
                comment_ids=tuple(str(note.get("id") or "") for note, _ in notes),
            )
        )
    return reviews


def _gitlab_line(note: Mapping[str, Any], thread: str) -> ReviewLineComment:
    position: Mapping[str, Any] = note["position"]
    new_line, old_line = _int(position.get("new_line")), _int(position.get("old_line"))
    side = "new" if new_line else "old"
    end = new_line or old_line
    start = end
    line_range = position.get("line_range")
    if isinstance(line_range, Mapping) and isinstance(line_range.get("start"), Mapping):
        first = line_range["start"]
        start = _int(first.get("new_line" if side == "new" else "old_line")) or end
    return ReviewLineComment(
        comment_id=str(note.get("id") or ""),
        thread_id=thread,
        path=_text(position.get("new_path") if side == "new" else position.get("old_path"), 1000),
        line_start=min(start, end) if start and end else None,
        line_end=end,
        side=side,
        body=_text(note.get("body"), COMMENT_BODY_MAX_CHARS),
    )


def own_login(client: ForgeClient) -> str:
    """The login of the token's own user (GitHub, Gitea: ``GET /user``'s login; GitLab:
    its username), kept for an hour: what AutoCoder's own replies are known by."""
    key = "forge-own-login:" + hashlib.sha256(f"{client.api_url}\n{client._token}".encode()).hexdigest()
    login = cache.get(key)
    if login is None:
        login, _ = _login(client.call("GET", "/user"))
        cache.set(key, login, OWN_LOGIN_CACHE_SECONDS)
    return str(login)


def commenter_may_write(client: ForgeClient, *, login: str, user_id: str) -> bool:
    """Whether the forge gives ``login`` write access to the repository (GitHub: the
    collaborator permission admin, maintain or write; Gitea: owner, admin or write;
    GitLab: a member at Developer or above). Unknown there: False; the forge failing:
    ForgeError."""
    try:
        if client.kind == ForgeKind.GITLAB:
            assert isinstance(client, GitLab)
            if not user_id.isdigit():
                return False
            member = client.call("GET", f"/projects/{client._project()}/members/all/{user_id}")
            return isinstance(member, Mapping) and (_int(member.get("access_level")) or 0) >= GITLAB_DEVELOPER
        answer = client.call("GET", f"/repos/{client.repository}/collaborators/{quote(login, safe='')}/permission")
    except ForgeError as error:
        if error.code == "forge_not_found":
            return False
        raise
    return isinstance(answer, Mapping) and str(answer.get("permission") or "") in WRITE_PERMISSIONS


def reply_post(client: ForgeClient, *, number: int, comment: ReplyTarget, body: str) -> str:
    """Answer ``comment`` on its thread; the reply's id."""
    body = body[:REPLY_MAX_CHARS]
    if client.kind == ForgeKind.GITHUB:
        path = f"/repos/{client.repository}/pulls/{number}/comments/{quote(comment.thread_id, safe='')}/replies"
        answer = client.call("POST", path, {"body": body})
    elif client.kind == ForgeKind.GITLAB:
        assert isinstance(client, GitLab)
        thread = quote(comment.thread_id, safe="")
        path = f"/projects/{client._project()}/merge_requests/{number}/discussions/{thread}/notes"
        answer = client.call("POST", path, {"body": body})
    else:
        # Gitea has no reply endpoint for a review comment: an issue comment quoting it.
        quoted = "\n".join(f"> {line}" for line in _quote_lines(comment))
        answer = client.call(
            "POST", f"/repos/{client.repository}/issues/{number}/comments", {"body": f"{quoted}\n\n{body}"}
        )
    return str(answer.get("id") or "") if isinstance(answer, Mapping) else ""


@dataclass(frozen=True)
class ReplyTarget:
    thread_id: str
    author: str
    path: str
    lines: str  # "line 7", "lines 7–9"
    body: str


def _quote_lines(comment: ReplyTarget) -> Iterable[str]:
    yield f"@{comment.author} on {comment.path}, {comment.lines}:"
    yield from comment.body[:500].splitlines()
