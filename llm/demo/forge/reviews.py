"""Reviews on the fake forge, in each forge's own shapes:

- GitHub: ``GET /repos/{o}/{r}/pulls/{n}/reviews``, ``…/reviews/{id}/comments``,
  ``GET …/pulls/{n}/comments`` (``line``, ``start_line``, ``side``, ``in_reply_to_id``),
  ``POST …/pulls/{n}/comments/{id}/replies`` (the reply is a comment of a new COMMENTED
  review by the token's user, as on GitHub).
- Gitea/Forgejo: the same paths, its states (REQUEST_CHANGES, COMMENT …) and comments
  (``position`` for a new line, ``original_position`` for an old one);
  ``POST /repos/{o}/{r}/issues/{n}/comments``.
- GitLab (``discussions``): ``GET /projects/:id/merge_requests/:iid/discussions`` (a DiffNote per line
  comment, with ``position``; the review's body a note of its own),
  ``POST …/discussions/:discussion_id/notes``.
- Who may write: GitHub's and Gitea's ``/collaborators/{user}/permission`` and
  ``/collaborators/{user}``, GitLab's ``/projects/:id/members/all/:user_id``; the token's
  own user: ``GET /user``.

``POST /_control/review`` {kind, repository, number, author, state, body, comments: [{path,
line, start_line?, side?, body}], webhook?, secret?} plays a reviewer and, given a webhook,
delivers what the forge would (GitLab: a Note Hook per note)."""

from __future__ import annotations

from typing import Any

from . import issues
from .answers import Answer, ForgeRequest, control_answer, forbidden, not_found
from .discussions import note_position
from .review_state import (
    FakeReview,
    FakeReviewComment,
    ReviewState,
    add_collaborator,
    add_review,
    pull_key,
    reviews_state,
    token_login,
    user_answer,
)
from .state import ForgeState

GITEA_STATES = {"CHANGES_REQUESTED": "REQUEST_CHANGES", "COMMENTED": "COMMENT"}
__all__ = ["add_collaborator", "add_review", "review_deliveries", "reviews_state"]


def _review_answer(data: ReviewState, kind: str, key: tuple[str, int], review: FakeReview) -> dict[str, Any]:
    state = GITEA_STATES.get(review.state, review.state) if kind == "gitea" else review.state
    answer = {
        "id": review.id,
        "user": user_answer(data, review.author, kind),
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
        "user": user_answer(data, comment.author, kind),
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


def _reviews(request: ForgeRequest) -> Answer:
    key = pull_key(request)
    if key is None:
        return not_found(request.kind)
    data = reviews_state(request.forge)
    return 200, [_review_answer(data, request.kind, key, review) for review in data.reviews.get(key, [])]


def _review_comments(request: ForgeRequest) -> Answer:
    key = pull_key(request)
    if key is None:
        return not_found(request.kind)
    data = reviews_state(request.forge)
    review_id = int(request.match["review"])
    if not any(review.id == review_id for review in data.reviews.get(key, [])):
        return not_found(request.kind)
    return 200, [_comment_answer(data, request.kind, c) for c in data.comments.get(key, []) if c.review_id == review_id]


def _pull_comments(request: ForgeRequest) -> Answer:
    key = pull_key(request)
    if key is None:
        return not_found(request.kind)
    data = reviews_state(request.forge)
    return 200, [_comment_answer(data, request.kind, c) for c in data.comments.get(key, [])]


def _reply(request: ForgeRequest) -> Answer:
    """GitHub: a reply is a comment of a new COMMENTED review by the token's user."""
    key = pull_key(request)
    if key is None or request.kind != "github":
        return not_found(request.kind)
    if not request.may_write:
        return forbidden(request.kind)
    data = reviews_state(request.forge)
    parent = next((c for c in data.comments.get(key, []) if c.id == int(request.match["comment"])), None)
    if parent is None:
        return not_found(request.kind)
    review = FakeReview(id=next(data.ids), author=token_login(request.forge, request.token), state="COMMENTED", body="")
    data.reviews[key].append(review)
    reply = FakeReviewComment(
        id=next(data.ids),
        review_id=review.id,
        author=token_login(request.forge, request.token),
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
    """A comment on a pull request's conversation — or, the number being an issue's (they
    share numbers), on the issue."""
    key = pull_key(request)
    if key is None:
        return issues.comment(request)
    if not request.may_write:
        return forbidden(request.kind)
    data = reviews_state(request.forge)
    comment = {
        "id": next(data.ids),
        "body": str(request.body.get("body", "")),
        "user": user_answer(data, token_login(request.forge, request.token), request.kind),
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
    return 200, {"permission": permission, "user": user_answer(data, login, request.kind)}


def _collaborator(request: ForgeRequest) -> Answer:
    assert request.repository is not None
    if request.match["user"] in reviews_state(request.forge).collaborators.get(request.repository.name, {}):
        return 204, ""
    return not_found(request.kind)


def _user_self(request: ForgeRequest) -> Answer:
    data = reviews_state(request.forge)
    return 200, user_answer(data, token_login(request.forge, request.token), request.kind)


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
        attributes |= {"discussion_id": comment.discussion_id, "position": note_position(comment)}
        payload = {
            "object_kind": "note",
            "user": user_answer(data, comment.author, "gitlab"),
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
    return control_answer(body, kind, deliveries, {"review": review.id})


def control_collaborator(forge: ForgeState, body: dict[str, Any]) -> Answer:
    try:
        add_collaborator(forge, str(body["repository"]), str(body["login"]), str(body.get("permission") or "write"))
    except KeyError as error:
        return 400, {"message": f"repository and login are required ({error})"}
    return 200, {"login": body["login"]}


PULL = r"/repos/(?P<repo>[^/]+/[^/]+)/pulls/(?P<number>\d+)"
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
    ("gitlab", "GET", r"/user", _user_self),
]
CONTROLS = {"/_control/review": control_review, "/_control/collaborator": control_collaborator}
