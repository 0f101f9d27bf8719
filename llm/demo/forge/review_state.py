"""What the fake forge keeps about reviews (on the forge's state, made on first use): reviews,
their comments, GitLab's notes, issue comments, who may write, and the token's own login;
a person on the forge writing a review (``add_review``) or given write access."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .answers import ForgeRequest
from .state import ForgeState, now_stamp

OWN_LOGIN = "autocoder-bot"


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


def token_login(forge: ForgeState, token: str) -> str:
    """The login of the account a token belongs to (``GET /user``): set per token in
    ``forge.logins``, else the forge's own bot account."""
    return forge.logins.get(token) or reviews_state(forge).own_login


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


def user_answer(data: ReviewState, login: str, kind: str) -> dict[str, Any]:
    name = "username" if kind == "gitlab" else "login"
    return {name: login, "id": data.user_id(login)}


def pull_key(request: ForgeRequest) -> tuple[str, int] | None:
    assert request.repository is not None
    number = int(request.match["number"])
    return (request.repository.name, number) if number in request.repository.pulls else None
