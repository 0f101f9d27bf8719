"""A forge's webhook delivery as its handlers get it: pipelines.pull_requests.webhooks
checks its signature and records it once, then hands it to each room's handler in turn
(a pull request's state, a review, its checks, a moved base; forge issues). Apart from
those rooms, so that each may read it without importing the others."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from repos.models import Repository


@dataclass(frozen=True)
class Delivery:
    repository: Repository
    kind: str  # ForgeKind
    event: str  # the forge's word: pull_request, check_run, merge_request, note …
    payload: Mapping[str, Any]
    headers: Mapping[str, str]
