"""Preparing a kept environment: one worker claims the row for a key (another waits for
it, or takes over from one that stopped reporting), runs setup in a worktree of its own
and keeps what setup produced."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.exceptions import ApplicationError
from core.sandbox_handover import workspace_reclaim
from core.sandbox_images import image_root

from ...git import run_git, worktree_access
from ...models import PreparedEnvironment, PreparedEnvironmentStatus, Repository
from .. import store
from ..scripts import SetupScript
from ..setup import run_setup
from .eviction import STALE_AFTER_SECONDS, environments_evict

HEARTBEAT_SECONDS = 10
SETUP_FAILED = (
    "The environment could not be prepared: the setup script ({source}) {how}. "
    "Change the setup script on the Repository page (or the file it comes from), then Retry."
)
SETUP_TIMED_OUT = "did not finish within {seconds} s (ENVIRONMENT_SETUP_TIMEOUT_SECONDS)"
SETUP_EXITED = "exited with status {code}"
SETUP_CANCELLED = "was stopped"


class EnvironmentBroken(ApplicationError):
    """The environment cannot be made ready (setup failed) or the test command cannot
    start in it: a person has to change something; no fix round is spent on it."""

    code = "environment_broken"

    def __init__(self, message: str, *, output: str = "") -> None:
        super().__init__(message)
        self.output = output


class SetupCancelled(ApplicationError):
    code = "setup_cancelled"


def prepared_environment_for(
    *,
    repository: Repository,
    key: str,
    script: SetupScript | None,
    files: list[tuple[str, str]],
    commit: str,
    on_output: Callable[[str], None],
    should_cancel: Callable[[], bool],
    holder: str = "",
    wait: bool = True,
) -> tuple[PreparedEnvironment, bool]:
    """The ready kept environment for ``key``, prepared now (by ``holder``) if there is
    none; whether it was prepared now. Waits while another worker prepares the same one;
    without ``wait``, returns the row as that worker has it."""
    holder = holder or secrets.token_hex(16)
    said_waiting = False
    while True:
        claimed, prepared = _claim(repository=repository, key=key, holder=holder)
        if claimed:
            break
        if prepared.status == PreparedEnvironmentStatus.READY or not wait:
            return prepared, False
        if not said_waiting:
            on_output("Another run is preparing the same environment; waiting for it.\n")
            said_waiting = True
        if should_cancel():
            raise SetupCancelled("Stopped while waiting for the environment.")
        time.sleep(1.0)
    _prepare(
        prepared=prepared,
        repository=repository,
        script=script,
        files=files,
        commit=commit,
        on_output=on_output,
        should_cancel=should_cancel,
    )
    prepared.refresh_from_db()
    return prepared, True


def _claim(*, repository: Repository, key: str, holder: str) -> tuple[bool, PreparedEnvironment]:
    """(claimed, row): the row for ``key``; claimed when this caller must prepare it
    (none yet, a failed one, one whose preparer died, a ready one whose files are gone)."""
    with transaction.atomic():
        prepared = PreparedEnvironment.objects.select_for_update().filter(repository=repository, key=key).first()
        if prepared is None:
            try:
                with transaction.atomic():
                    prepared = PreparedEnvironment.objects.create(
                        repository=repository, key=key, holder=holder, heartbeat_at=timezone.now()
                    )
            except IntegrityError:
                return False, PreparedEnvironment.objects.get(repository=repository, key=key)
            return True, prepared
        now = timezone.now()
        if prepared.status == PreparedEnvironmentStatus.READY:
            if store.prepared_folder(repository.pk, key).is_dir():
                return False, prepared
        elif prepared.status == PreparedEnvironmentStatus.PREPARING:
            # Without a heartbeat: queued by Rebuild, nobody on it yet.
            fresh = prepared.heartbeat_at and now - prepared.heartbeat_at < timedelta(seconds=STALE_AFTER_SECONDS)
            if fresh and prepared.holder != holder:
                return False, prepared
        prepared.status = PreparedEnvironmentStatus.PREPARING
        prepared.holder = holder
        prepared.heartbeat_at = now
        prepared.save(update_fields=["status", "holder", "heartbeat_at", "updated_at"])
        return True, prepared


def _prepare(
    *,
    prepared: PreparedEnvironment,
    repository: Repository,
    script: SetupScript | None,
    files: list[tuple[str, str]],
    commit: str,
    on_output: Callable[[str], None],
    should_cancel: Callable[[], bool],
) -> None:
    """Run setup in a worktree of its own at ``commit`` and keep what it produced."""
    from ...services.worktrees import worktree_detached_create, worktree_remove
    from ...variables import project_sandbox_variables, secret_masker

    PreparedEnvironment.objects.filter(pk=prepared.pk).update(
        source=script.source if script else "",
        setup_script=script.text if script else "",
        base_commit=commit,
        key_files=[list(item) for item in files],
        image=repository.base_image,
        exit_code=None,
        timed_out=False,
        output="",
        error="",
        paths=[],
        size_bytes=0,
        finished_at=None,
    )
    build = store.build_folder(repository.pk, prepared.key)
    last_beat = time.monotonic()

    def cancel_or_beat() -> bool:
        nonlocal last_beat
        if time.monotonic() - last_beat > HEARTBEAT_SECONDS:
            last_beat = time.monotonic()
            PreparedEnvironment.objects.filter(pk=prepared.pk, holder=prepared.holder).update(
                heartbeat_at=timezone.now()
            )
        return should_cancel()

    kept_output: list[str] = []

    def output(text: str) -> None:
        kept_output.append(text)
        on_output(text)

    label = script.label if script else "no setup script"
    output(f"Preparing the environment {prepared.key[:12]} with {label}, with network, at {commit[:12]}.\n")
    try:
        worktree_detached_create(repository=repository, path=build, commit=commit)
        if script is None:
            result = None
        else:
            image = image_root(repository.base_image) if repository.base_image else None
            result = run_setup(
                script=script.text,
                image=image,
                worktree=build,
                cache=store.package_cache(repository.pk),
                variables=project_sandbox_variables(repository.project),
                masker=secret_masker(repository.project),
                on_output=output,
                should_cancel=cancel_or_beat,
            )
            workspace_reclaim(store.package_cache(repository.pk))
        if result is not None and not result.passed:
            _finish_failed(prepared=prepared, script=script, result=result)
        paths = _produced_paths(repository, build)
        size, count = store.capture(build=build, paths=paths, target=store.prepared_folder(repository.pk, prepared.key))
        duration = result.duration_ms if result is not None else 0
        output(
            f"\n[environment ready in {duration / 1000:.1f} s: {', '.join(paths) or 'nothing produced'}; "
            f"{count} files, {size / 1e6:.1f} MB kept]\n"
        )
        PreparedEnvironment.objects.filter(pk=prepared.pk).update(
            status=PreparedEnvironmentStatus.READY,
            exit_code=0 if result is not None else None,
            output=(result.output if result is not None else "")[-settings.ENVIRONMENT_OUTPUT_MAX_CHARS :],
            duration_ms=duration,
            size_bytes=size,
            paths=paths,
            finished_at=timezone.now(),
            last_used_at=timezone.now(),
            updated_at=timezone.now(),
        )
    except (EnvironmentBroken, SetupCancelled):
        raise
    except Exception as exc:
        PreparedEnvironment.objects.filter(pk=prepared.pk).update(
            status=PreparedEnvironmentStatus.FAILED,
            error=str(getattr(exc, "message", exc))[:2000],
            output="".join(kept_output)[-settings.ENVIRONMENT_OUTPUT_MAX_CHARS :],
            finished_at=timezone.now(),
            updated_at=timezone.now(),
        )
        raise
    finally:
        worktree_remove(repository=repository, path=build)
    environments_evict(keep=prepared.pk)


def _finish_failed(*, prepared: PreparedEnvironment, script: SetupScript | None, result: Any) -> None:
    if result.cancelled:
        PreparedEnvironment.objects.filter(pk=prepared.pk).update(
            status=PreparedEnvironmentStatus.FAILED,
            error="cancelled",
            finished_at=timezone.now(),
            updated_at=timezone.now(),
        )
        raise SetupCancelled("Setup was stopped.")
    if result.timed_out:
        how = SETUP_TIMED_OUT.format(seconds=settings.ENVIRONMENT_SETUP_TIMEOUT_SECONDS)
    else:
        how = SETUP_EXITED.format(code=result.exit_code) if result.exit_code else "went over a limit of the sandbox"
    message = SETUP_FAILED.format(source=script.label if script else "none", how=how)
    PreparedEnvironment.objects.filter(pk=prepared.pk).update(
        status=PreparedEnvironmentStatus.FAILED,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        output=result.output[-settings.ENVIRONMENT_OUTPUT_MAX_CHARS :],
        duration_ms=result.duration_ms,
        error=message,
        finished_at=timezone.now(),
        updated_at=timezone.now(),
    )
    raise EnvironmentBroken(message, output=result.output[-4000:])


def _produced_paths(repository: Repository, build: Path) -> list[str]:
    """The untracked and ignored paths setup left in ``build`` (git collapses a new
    folder to one entry)."""
    listing = run_git(
        ["status", "--porcelain=v1", "-z", "--ignored=matching", "--untracked-files=normal", "--no-renames"],
        cwd=build,
        access=worktree_access(Path(repository.path), build),
    ).stdout
    paths: list[str] = []
    for entry in listing.split("\x00"):
        if entry[:3] in ("?? ", "!! "):
            path = entry[3:].rstrip("/")
            if path and path != ".git" and not path.startswith(".git/"):
                paths.append(path)
    # An ignored folder inside an untracked one (``.venv/lib`` under a ``lib/`` rule) is
    # listed too; it is kept and restored with its parent, not as a path of its own.
    listed = set(paths)
    return sorted(path for path in paths if not any(parent.as_posix() in listed for parent in Path(path).parents))
