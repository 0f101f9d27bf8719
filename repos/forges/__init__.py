"""The team's forge — GitHub (incl. Enterprise), GitLab, Gitea/Forgejo — through one
registry (``client.forge_client``): ``client`` talks to it (pull requests; the one
``ForgeClient.call``), ``hosts`` says where the server may connect, ``webhooks`` checks
and reads its deliveries. Feature modules beside them build on ``ForgeClient.call``."""

from .client import CLIENTS, ForgeClient, Gitea, GitHub, GitLab, forge_client, open_or_merged
from .errors import SCOPE_HINTS, ForgeError, ForgeKind, PullRequestInfo, PullRequestState
from .hosts import forge_host_check
from .webhooks import (
    webhook_body_digest,
    webhook_delivery_id,
    webhook_event,
    webhook_is_authentic,
    webhook_pull_request,
)

__all__ = [
    "CLIENTS",
    "SCOPE_HINTS",
    "ForgeClient",
    "ForgeError",
    "ForgeKind",
    "GitHub",
    "GitLab",
    "Gitea",
    "PullRequestInfo",
    "PullRequestState",
    "forge_client",
    "forge_host_check",
    "open_or_merged",
    "webhook_body_digest",
    "webhook_delivery_id",
    "webhook_event",
    "webhook_is_authentic",
    "webhook_pull_request",
]
