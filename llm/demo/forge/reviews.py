"""Reviews on the fake forge, in each forge's own shapes:

- GitHub: ``GET /repos/{o}/{r}/pulls/{n}/reviews``, ``…/reviews/{id}/comments``,
  ``GET …/pulls/{n}/comments`` (``line``, ``start_line``, ``side``, ``in_reply_to_id``),
  ``POST …/pulls/{n}/comments/{id}/replies`` (the reply is a comment of a new COMMENTED
  review by the token's user, as on GitHub).
- Gitea/Forgejo: the same paths, its states (REQUEST_CHANGES, COMMENT …) and comments
  (``position`` for a new line, ``original_position`` for an old one);
  ``POST /repos/{o}/{r}/issues/{n}/comments``.
- GitLab: ``GET /projects/:id/merge_requests/:iid/discussions`` (a DiffNote per line
  comment, with ``position``; the review's body a note of its own),
  ``POST …/discussions/:discussion_id/notes``.
- Who may write: GitHub's and Gitea's ``/collaborators/{user}/permission`` and
  ``/collaborators/{user}``, GitLab's ``/projects/:id/members/all/:user_id``; the token's
  own user: ``GET /user``.

``POST /_control/review`` {kind, repository, number, author, state, body, comments: [{path,
line, start_line?, side?, body}], webhook?, secret?} plays a reviewer and, given a webhook,
delivers what the forge would (GitLab: a Note Hook per note)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .answers import Answer, ForgeRequest, control_deliver, forbidden, not_found
from .state import ForgeState, now_stamp

OWN_LOGIN = "autocoder-bot"
GITEA_STATES = {"CHANGES_REQUESTED": "REQUEST_CHANGES", "COMMENTED": "COMMENT"}


@dataclass
class FakeReviewComment:
    id: int
    review_id: int
    author: str
    path: str
    line: int | None
    start_line: int | None
    side: str  # RIGHT or LEFT
    body: str
    in_reply_to: int | None = None
    discussion_id: str = ""


@dataclass
class FakeReview:
    id: int
    author: str
    state: str  # GitHub's word
    body: str
    submitted_at: str = field(default_factory=now_stamp)


@dataclass
class ReviewState:
    """Kept on the forge (``reviews_state``): per (repository, number)."""

    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))
    reviews: dict[tuple[str, int], list[FakeReview]] = field(default_factory=dict)
    comments: dict[tuple[str, int], list[FakeReviewComment]] = field(default_factory=dict)
    # GitLab: notes of the review's body, per (repository, number): (note id, author, body).
    notes: dict[tuple[str, int], list[tuple[int, str, str]]] = field(default_factory=dict)
    issue_comments: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    # repository -> login -> permission (admin, write, read); GitLab: an access level.
    collaborators: dict[str, dict[str, str]] = field(default_factory=dict)
    user_ids: dict[str, int] = field(default_factory=dict)
    own_login: str = OWN_LOGIN

    def user_id(self, login: str) -> int:
        return self.user_ids.setdefault(login, 500 + len(self.user_ids))


def reviews_state(forge: ForgeState) -> ReviewState:
    """The forge's reviews (made on first use: the shared state knows nothing of them)."""
    state = getattr(forge, "_reviews_state", None)
    if state is None:
        state = ReviewState()
        forge._reviews_state = state  # type: ignore[attr-defined]
    return state


def add_collaborator(forge: ForgeState, repository: str, login: str, permission: str = "write") -> None:
    with forge.lock:
        data = reviews_state(forge)
        data.user_id(login)
        data.collaborators.setdefault(repository, {})[login] = permission


def add_review(
    forge: ForgeState,
    *,
    repository: str,
    number: int,
    author: str,
    state: str,
    body: str,
    comments: list[dict[str, Any]],
) -> FakeReview:
    """A person submits a review with line comments ({path, line, start_line?, side?, body})."""
    with forge.lock:
        data = reviews_state(forge)
        data.user_id(author)
        review = FakeReview(id=next(data.ids), author=author, state=state.upper(), body=body)
        data.reviews.setdefault((repository, number), []).append(review)
        for given in comments:
            comment_id = next(data.ids)
            data.comments.setdefault((repository, number), []).append(
                FakeReviewComment(
                    id=comment_id,
                    review_id=review.id,
                    author=author,
                    path=str(given["path"]),
                    line=int(given["line"]),
                    start_line=int(given["start_line"]) if given.get("start_line") else None,
                    side=str(given.get("side") or "RIGHT").upper(),
                    body=str(given.get("body", "")),
                    discussion_id=f"d{comment_id:08x}",
                )
            )
        if body:
            data.notes.setdefault((repository, number), []).append((next(data.ids), author, body))
        return review


def _user(data: ReviewState, login: str, kind: str) -> dict[str, Any]:
    name = "username" if kind == "gitlab" else "login"
    return {name: login, "id": data.user_id(login)}


def _review_answer(data: ReviewState, kind: str, key: tuple[str, int], review: FakeReview) -> dict[str, Any]:
    state = GITEA_STATES.get(review.state, review.state) if kind == "gitea" else review.state
    answer = {
        "id": review.id,
        "user": _user(data, review.author, kind),
        "body": review.body,
        "state": state,
        "submitted_at": review.submitted_at,
    }
    if kind == "gitea":
        answer["comments_count"] = sum(1 for c in data.comments.get(key, []) if c.review_id == review.id)
    return answer


def _comment_answer(data: ReviewState, kind: str, comment: FakeReviewComment) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "id": comment.id,
        "pull_request_review_id": comment.review_id,
        "user": _user(data, comment.author, kind),
        "path": comment.path,
        "body": comment.body,
    }
    if kind == "gitea":
        old = comment.side == "LEFT"
        answer |= {"position": 0 if old else comment.line or 0, "original_position": comment.line if old else 0}
        return answer
    return answer | {
        "line": comment.line,
        "start_line": comment.start_line,
        "side": comment.side,
        "start_side": comment.side if comment.start_line else None,
        "in_reply_to_id": comment.in_reply_to,
    }


def _key(request: ForgeRequest) -> tuple[str, int] | None:
    assert request.repository is not None
    number = int(request.match["number"])
    return (request.repository.name, number) if number in request.repository.pulls else None


def _reviews(request: ForgeRequest) -> Answer:
    key = _key(request)
    if key is None:
        return not_found(request.kind)
    data = reviews_state(request.forge)
    return 200, [_review_answer(data, request.kind, key, review) for review in data.reviews.get(key, [])]


def _review_comments(request: ForgeRequest) -> Answer:
    key = _key(request)
    if key is None:
        return not_found(request.kind)
    data = reviews_state(request.forge)
    review_id = int(request.match["review"])
    if not any(review.id == review_id for review in data.reviews.get(key, [])):
        return not_found(request.kind)
    return 200, [_comment_answer(data, request.kind, c) for c in data.comments.get(key, []) if c.review_id == review_id]


def _pull_comments(request: ForgeRequest) -> Answer:
    key = _key(request)
    if key is None:
        return not_found(request.kind)
    data = reviews_state(request.forge)
    return 200, [_comment_answer(data, request.kind, c) for c in data.comments.get(key, [])]


def _reply(request: ForgeRequest) -> Answer:
    """GitHub: a reply is a comment of a new COMMENTED review by the token's user."""
    key = _key(request)
    if key is None or request.kind != "github":
        return not_found(request.kind)
    if not request.may_write:
        return forbidden(request.kind)
    data = reviews_state(request.forge)
    parent = next((c for c in data.comments.get(key, []) if c.id == int(request.match["comment"])), None)
    if parent is None:
        return not_found(request.kind)
    review = FakeReview(id=next(data.ids), author=data.own_login, state="COMMENTED", body="")
    data.reviews[key].append(review)
    reply = FakeReviewComment(
        id=next(data.ids),
        review_id=review.id,
        author=data.own_login,
        path=parent.path,
        line=parent.line,
        start_line=parent.start_line,
        side=parent.side,
        body=str(request.body.get("body", "")),
        in_reply_to=parent.id,
    )
    data.comments[key].append(reply)
    return 201, _comment_answer(data, request.kind, reply)


def _issue_comment(request: ForgeRequest) -> Answer:
    key = _key(request)
    if key is None:
        return not_found(request.kind)
    if not request.may_write:
        return forbidden(request.kind)
    data = reviews_state(request.forge)
    comment = {
        "id": next(data.ids),
        "body": str(request.body.get("body", "")),
        "user": _user(data, data.own_login, request.kind),
    }
    data.issue_comments.setdefault(key, []).append(comment)
    return 201, comment


def _permission(request: ForgeRequest) -> Answer:
    assert request.repository is not None
    login = request.match["user"]
    data = reviews_state(request.forge)
    if login not in data.user_ids:
        return not_found(request.kind)
    permission = data.collaborators.get(request.repository.name, {}).get(login, "read")
    return 200, {"permission": permission, "user": _user(data, login, request.kind)}


def _collaborator(request: ForgeRequest) -> Answer:
    assert request.repository is not None
    if request.match["user"] in reviews_state(request.forge).collaborators.get(request.repository.name, {}):
        return 204, ""
    return not_found(request.kind)


def _user_self(request: ForgeRequest) -> Answer:
    data = reviews_state(request.forge)
    return 200, _user(data, data.own_login, request.kind)


# --- GitLab


def _gitlab_note(data: ReviewState, note_id: int, author: str, body: str, **extra: Any) -> dict[str, Any]:
    return {"id": note_id, "body": body, "author": _user(data, author, "gitlab"), "system": False, **extra}


def _discussions(request: ForgeRequest) -> Answer:
    key = _key(request)
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
            _gitlab_note(data, c.id, c.author, c.body, type="DiffNote", position=_position(c), resolvable=True)
            for c in comments
        ]
        found.append({"id": discussion_id, "individual_note": False, "notes": notes})
    return 200, found


def _position(comment: FakeReviewComment) -> dict[str, Any]:
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
    key = _key(request)
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
        author=data.own_login,
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


# --- a reviewer on the forge


def review_deliveries(
    forge: ForgeState, kind: str, repository: str, number: int, review: FakeReview
) -> list[tuple[str, dict[str, Any]]]:
    """The events the forge sends for a submitted review: GitHub one pull_request_review,
    Gitea one pull_request_review_*, GitLab a Note Hook per note."""
    data = reviews_state(forge)
    key = (repository, number)
    pull = {"number": number, "state": "open", "html_url": forge.html_url(kind, repository, number)}
    if kind == "github":
        answer = _review_answer(data, kind, key, review) | {"state": review.state.lower()}
        return [("pull_request_review", {"action": "submitted", "review": answer, "pull_request": pull})]
    if kind == "gitea":
        event = "pull_request_review_rejected" if review.state == "CHANGES_REQUESTED" else "pull_request_review_comment"
        body = {"action": "reviewed", "pull_request": pull, "review": {"type": event, "content": review.body}}
        return [(event, body)]
    deliveries = []
    for comment in (c for c in data.comments.get(key, []) if c.review_id == review.id):
        attributes = {"id": comment.id, "note": comment.body, "noteable_type": "MergeRequest", "type": "DiffNote"}
        attributes |= {"discussion_id": comment.discussion_id, "position": _position(comment)}
        payload = {
            "object_kind": "note",
            "user": _user(data, comment.author, "gitlab"),
            "project": {"path_with_namespace": repository},
            "merge_request": {"iid": number, "state": "opened"},
            "object_attributes": attributes,
        }
        deliveries.append(("Note Hook", payload))
    return deliveries


def control_review(forge: ForgeState, body: dict[str, Any]) -> Answer:
    try:
        kind, repository, number = str(body["kind"]), str(body["repository"]), int(body["number"])
        if number not in forge.repositories[repository].pulls:
            return 404, {"message": "no such pull request"}
        review = add_review(
            forge,
            repository=repository,
            number=number,
            author=str(body["author"]),
            state=str(body.get("state") or "COMMENTED"),
            body=str(body.get("body") or ""),
            comments=list(body.get("comments") or []),
        )
        with forge.lock:
            deliveries = review_deliveries(forge, kind, repository, number, review)
    except (KeyError, TypeError, ValueError) as error:
        return 400, {"message": f"kind, repository, number and author are required ({error})"}
    answer: dict[str, Any] = {"review": review.id, "webhook_status": []}
    for event, payload in deliveries:
        delivered = control_deliver(body, kind, event, payload)
        if delivered is None:
            break
        if delivered[0] != 200:
            return delivered
        answer["webhook_status"].append(delivered[1]["webhook_status"])
    return 200, answer


def control_collaborator(forge: ForgeState, body: dict[str, Any]) -> Answer:
    try:
        add_collaborator(forge, str(body["repository"]), str(body["login"]), str(body.get("permission") or "write"))
    except KeyError as error:
        return 400, {"message": f"repository and login are required ({error})"}
    return 200, {"login": body["login"]}


PULL = r"/repos/(?P<repo>[^/]+/[^/]+)/pulls/(?P<number>\d+)"
MR = r"/projects/(?P<repo>[^/]+)/merge_requests/(?P<number>\d+)"
COLLABORATOR = r"/repos/(?P<repo>[^/]+/[^/]+)/collaborators/(?P<user>[^/]+)"

ROUTES = [
    ("github", "GET", PULL + r"/reviews", _reviews),
    ("github", "GET", PULL + r"/reviews/(?P<review>\d+)/comments", _review_comments),
    ("github", "GET", PULL + r"/comments", _pull_comments),
    ("github", "POST", PULL + r"/comments/(?P<comment>\d+)/replies", _reply),
    ("github", "POST", r"/repos/(?P<repo>[^/]+/[^/]+)/issues/(?P<number>\d+)/comments", _issue_comment),
    ("github", "GET", COLLABORATOR + r"/permission", _permission),
    ("github", "GET", COLLABORATOR, _collaborator),
    ("github", "GET", r"/user", _user_self),
    ("gitlab", "GET", MR + r"/discussions", _discussions),
    ("gitlab", "POST", MR + r"/discussions/(?P<discussion>[^/]+)/notes", _discussion_note),
    ("gitlab", "GET", r"/projects/(?P<repo>[^/]+)/members/all/(?P<user_id>\d+)", _member),
    ("gitlab", "GET", r"/user", _user_self),
]
CONTROLS = {"/_control/review": control_review, "/_control/collaborator": control_collaborator}
