"""What every forge module shares: the kinds of forge, a pull request's states, and the
error a forge's refusal or absence becomes."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


class ForgeKind(models.TextChoices):
    GITHUB = "github", "GitHub"
    GITLAB = "gitlab", "GitLab"
    GITEA = "gitea", "Gitea / Forgejo"


class PullRequestState(models.TextChoices):
    OPEN = "open", "Open"
    MERGED = "merged", "Merged"
    CLOSED = "closed", "Closed"


@dataclass(frozen=True)
class PullRequestInfo:
    number: int
    url: str
    state: str  # PullRequestState


class ForgeError(Exception):
    """A forge refused or could not be reached. ``code`` names the case for the API."""

    def __init__(self, message: str, *, code: str, retryable: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = retryable
        self.status = status


# What each forge calls the token's permission to open pull requests.
SCOPE_HINTS = {
    ForgeKind.GITHUB: "a fine-grained token with “Pull requests: write” and “Contents: write”, or a classic one "
    "with “repo”",
    ForgeKind.GITLAB: "the “api” scope and at least the Developer role",
    ForgeKind.GITEA: "the “write:repository” scope",
}
