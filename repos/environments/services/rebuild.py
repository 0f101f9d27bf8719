"""Rebuild from the Repository page: the base branch head's environment prepared again
from scratch, by a worker, its output stored as it comes."""

from __future__ import annotations

import logging
import secrets
import time
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.exceptions import ApplicationError

from ...models import PreparedEnvironment, PreparedEnvironmentStatus, Repository
from .. import store
from .eviction import STALE_AFTER_SECONDS
from .preparing import prepared_environment_for
from .ready import environment_in_force

logger = logging.getLogger(__name__)


def environment_rebuild(*, repository: Repository) -> PreparedEnvironment:
    """Prepare the environment of the base branch's head again, from scratch (the kept
    one for its key is dropped first); runs in a worker (``repos.tasks``). Returns the
    row whose state and output the page shows."""
    from core.jobs import enqueue_on_commit

    from ...services.branches import base_branch_head

    commit = base_branch_head(repository=repository)
    _, key, _ = environment_in_force(repository=repository, commit=commit)
    if not key:
        raise ValidationError({"setup_script": ["There is no setup script (or base image) to prepare."]})
    with transaction.atomic():
        prepared, _ = PreparedEnvironment.objects.select_for_update().get_or_create(repository=repository, key=key)
        beat = prepared.heartbeat_at
        under_way = prepared.status == PreparedEnvironmentStatus.PREPARING and beat is not None
        if under_way and beat is not None and timezone.now() - beat < timedelta(seconds=STALE_AFTER_SECONDS):
            return prepared  # the page shows it
        store.remove(store.prepared_folder(repository.pk, key))
        # Preparing from now on, for the page and the API, though no worker holds it yet
        # (no heartbeat: the worker that takes the job claims it at once).
        prepared.status = PreparedEnvironmentStatus.PREPARING
        prepared.holder = ""
        prepared.error = prepared.output = ""
        prepared.heartbeat_at = prepared.exit_code = None
        prepared.duration_ms = prepared.size_bytes = 0
        prepared.save(
            update_fields=[
                "status", "holder", "error", "output", "heartbeat_at", "exit_code", "duration_ms", "size_bytes",
                "updated_at",
            ]
        )  # fmt: skip
        enqueue_on_commit("repos.tasks.repository_prepare_environment", repository.pk, commit)
    return prepared


def environment_prepare_in_background(*, repository_id: int, commit: str) -> None:
    """The worker's side of a rebuild: prepare and keep, the output stored as it comes
    (the page polls it). Another worker already on it is left to it."""
    repository = Repository.objects.select_related("project").filter(pk=repository_id).first()
    if repository is None:
        return
    script, key, files = environment_in_force(repository=repository, commit=commit)
    if not key:
        return
    holder = secrets.token_hex(16)
    streamed: list[str] = []
    last_saved = time.monotonic()

    def on_output(text: str) -> None:
        nonlocal last_saved
        streamed.append(text)
        if time.monotonic() - last_saved > 1.0:
            last_saved = time.monotonic()
            # By key and holder: the row's id is known only once it is claimed, and a worker
            # that lost the row to another writes nothing.
            PreparedEnvironment.objects.filter(repository=repository, key=key, holder=holder).update(
                output="".join(streamed)[-settings.ENVIRONMENT_OUTPUT_MAX_CHARS :], heartbeat_at=timezone.now()
            )

    try:
        prepared_environment_for(
            repository=repository,
            key=key,
            script=script,
            files=files,
            commit=commit,
            on_output=on_output,
            should_cancel=lambda: False,
            holder=holder,
            wait=False,
        )
    except ApplicationError as exc:
        logger.info("Environment %s of repository %s not prepared: %s", key[:12], repository.pk, exc.message)
