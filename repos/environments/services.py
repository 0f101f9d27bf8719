"""The public actions on environments: make one ready for a run's worktree, rebuild one
from the Repository page, evict old ones, change the page's settings."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from core.exceptions import ApplicationError
from core.sandbox import ProjectSandbox, workspace_reclaim
from core.sandbox_images import image_root

from ..git import repository_read_access, run_git, worktree_access
from ..models import PreparedEnvironment, PreparedEnvironmentStatus, Repository
from . import store
from .keys import environment_key, key_files
from .scripts import SetupScript, setup_in_force
from .setup import run_setup

logger = logging.getLogger(__name__)

# A preparation nobody has reported on for this long was left by a worker that died.
STALE_AFTER_SECONDS = 90
HEARTBEAT_SECONDS = 10
SETUP_FAILED = (
    "The environment could not be prepared: the setup script ({source}) {how}. "
    "Change the setup script on the Repository page (or the file it comes from), then Retry."
)
SETUP_TIMED_OUT = "did not finish within {seconds} s (ENVIRONMENT_SETUP_TIMEOUT_SECONDS)"
SETUP_EXITED = "exited with status {code}"
SETUP_CANCELLED = "was stopped"
MAX_SETUP_SCRIPT = 20_000


class EnvironmentBroken(ApplicationError):
    """The environment cannot be made ready (setup failed) or the test command cannot
    start in it: a person has to change something; no fix round is spent on it."""

    code = "environment_broken"

    def __init__(self, message: str, *, output: str = "") -> None:
        super().__init__(message)
        self.output = output


class SetupCancelled(ApplicationError):
    code = "setup_cancelled"


@dataclass
class EnvironmentReady:
    """What a run's worktree got: the key, which script, which kept environment, what
    was restored (and what was not, and why), and how long it took."""

    key: str = ""
    source: str = ""
    prepared_id: int | None = None
    prepared_now: bool = False
    paths: list[str] = field(default_factory=list)
    skipped: list[list[str]] = field(default_factory=list)
    restore_ms: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def environment_in_force(
    *, repository: Repository, commit: str, script_commit: str = ""
) -> tuple[SetupScript | None, str, list[tuple[str, str]]]:
    """The setup script in force at ``script_commit`` (default: ``commit``), the key
    with the key files at ``commit``, and those files."""
    repo = Path(repository.path)
    access = repository_read_access(repo)
    script = setup_in_force(
        page_script=repository.setup_script, repo=repo, access=access, commit=script_commit or commit
    )
    if script is None and not repository.base_image:
        return None, "", []
    files = key_files(repo=repo, access=access, commit=commit) if commit else []
    key = environment_key(script=script.text if script else "", image=repository.base_image, files=files)
    return script, key, files


def environment_needed(*, repository: Repository, commit: str) -> bool:
    """Whether a run from ``commit`` has something to prepare or check before coding."""
    if repository.test_command.strip() or repository.setup_script.strip() or repository.base_image:
        return True
    script, _, _ = environment_in_force(repository=repository, commit=commit)
    return script is not None


def commands_sandbox(*, repository: Repository, network: bool = False, kept: tuple[str, ...] = ()) -> ProjectSandbox:
    """How the repository's test command runs: its project's variables, on its base
    image's tree when it names one (pulled and unpacked the first time, then cached by
    digest), and the network only where the project opted its tests in. Raises
    ImageUnavailable (an ApplicationError: the run pauses saying why) when the image
    cannot be had."""
    from ..variables import project_sandbox_variables

    return ProjectSandbox(
        variables=project_sandbox_variables(repository.project),
        share_network=network or repository.tests_network,
        image=image_root(repository.base_image) if repository.base_image else None,
        kept=kept,
    )


def environment_make_ready(
    *,
    repository: Repository,
    worktree: Path,
    commit: str,
    on_output: Callable[[str], None],
    should_cancel: Callable[[], bool],
    script_commit: str = "",
) -> EnvironmentReady:
    """The environment for ``commit`` in ``worktree``: a kept one restored when its key
    matches (about a second, no network), else prepared now (setup, with network) and
    kept for the next runs. Raises EnvironmentBroken when setup fails, SetupCancelled
    when ``should_cancel`` says so, SandboxUnavailable where no sandbox can be made."""
    script, key, files = environment_in_force(repository=repository, commit=commit, script_commit=script_commit)
    if not key:
        return EnvironmentReady()
    prepared, prepared_now = _prepared_for(
        repository=repository,
        key=key,
        script=script,
        files=files,
        commit=commit,
        on_output=on_output,
        should_cancel=should_cancel,
    )
    restored = store.restore(
        kept=store.prepared_folder(repository.pk, key), paths=list(prepared.paths), worktree=worktree
    )
    PreparedEnvironment.objects.filter(pk=prepared.pk).update(last_used_at=timezone.now())
    if not prepared_now:
        on_output(
            f"Environment {key[:12]} (prepared {prepared.finished_at:%Y-%m-%d %H:%M}) restored in "
            f"{restored.milliseconds / 1000:.1f} s: {', '.join(restored.paths) or 'nothing to restore'}\n"
        )
    for path, why in restored.skipped:
        on_output(f"Not restored: {path} ({why})\n")
    return EnvironmentReady(
        key=key,
        source=script.source if script else "",
        prepared_id=prepared.pk,
        prepared_now=prepared_now,
        paths=restored.paths,
        skipped=[list(item) for item in restored.skipped],
        restore_ms=restored.milliseconds,
    )


def environment_for_change(
    *,
    repository: Repository,
    worktree: Path,
    ready: dict[str, Any],
    base_commit: str,
    head_commit: str,
    on_output: Callable[[str], None],
    should_cancel: Callable[[], bool],
) -> EnvironmentReady | None:
    """When a run's change touches a file its environment is keyed by (a lockfile, a
    manifest), the environment of the change: prepared (or found kept) for the new key
    and put in the worktree instead of the old one. None when the key is the same.
    The setup script stays the base commit's: a change never chooses what runs with the
    network. Raises EnvironmentBroken when setup fails on the change."""
    if not ready.get("key"):
        return None
    _, key, _ = environment_in_force(repository=repository, commit=head_commit, script_commit=base_commit)
    if key == ready.get("key"):
        return None
    on_output(
        "The change touches files the environment is keyed by: preparing the environment of the change "
        f"({key[:12]}) for this run.\n"
    )
    for path in ready.get("paths", []):
        store.remove_from_worktree(worktree, path)
    return environment_make_ready(
        repository=repository,
        worktree=worktree,
        commit=head_commit,
        script_commit=base_commit,
        on_output=on_output,
        should_cancel=should_cancel,
    )


def environment_restore_missing(*, repository: Repository, worktree: Path, ready: dict[str, Any]) -> list[str]:
    """Put back what a run's worktree had restored and lost (``git clean`` of a redone
    phase removes what the repository does not ignore); the paths restored again. A
    kept environment evicted meanwhile is not made again here: the run's tests say so."""
    key = ready.get("key") or ""
    if not key:
        return []
    kept = store.prepared_folder(repository.pk, key)
    if not kept.is_dir():
        return []
    # A path git clean emptied only in part (what the repository ignores inside it
    # stays) is restored whole again, not taken as there.
    missing = [path for path in ready.get("paths", []) if not store.intact(kept=kept, relative=path, worktree=worktree)]
    for path in missing:
        store.remove_from_worktree(worktree, path)
    if not missing:
        return []
    return store.restore(kept=kept, paths=missing, worktree=worktree).paths


def _prepared_for(
    *,
    repository: Repository,
    key: str,
    script: SetupScript | None,
    files: list[tuple[str, str]],
    commit: str,
    on_output: Callable[[str], None],
    should_cancel: Callable[[], bool],
) -> tuple[PreparedEnvironment, bool]:
    """The ready kept environment for ``key``, prepared now if there is none; whether
    it was prepared now. Waits while another worker prepares the same one."""
    holder = secrets.token_hex(16)
    said_waiting = False
    while True:
        claimed, prepared = _claim(repository=repository, key=key, holder=holder)
        if prepared.status == PreparedEnvironmentStatus.READY and not claimed:
            return prepared, False
        if claimed:
            break
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
    from ..services.worktrees import worktree_detached_create, worktree_remove
    from ..variables import project_sandbox_variables, secret_masker

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


def environment_rebuild(*, repository: Repository) -> PreparedEnvironment:
    """Prepare the environment of the base branch's head again, from scratch (the kept
    one for its key is dropped first); runs in a worker (``repos.tasks``). Returns the
    row whose state and output the page shows."""
    from core.jobs import enqueue_on_commit

    from ..services.branches import base_branch_head

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
    (the page polls it)."""
    repository = Repository.objects.select_related("project").filter(pk=repository_id).first()
    if repository is None:
        return
    script, key, files = environment_in_force(repository=repository, commit=commit)
    if not key:
        return
    holder = secrets.token_hex(16)
    claimed, prepared = _claim(repository=repository, key=key, holder=holder)
    if not claimed:
        return
    streamed: list[str] = []
    last_saved = time.monotonic()

    def on_output(text: str) -> None:
        nonlocal last_saved
        streamed.append(text)
        if time.monotonic() - last_saved > 1.0:
            last_saved = time.monotonic()
            PreparedEnvironment.objects.filter(pk=prepared.pk, holder=holder).update(
                output="".join(streamed)[-settings.ENVIRONMENT_OUTPUT_MAX_CHARS :], heartbeat_at=timezone.now()
            )

    try:
        _prepare(
            prepared=prepared,
            repository=repository,
            script=script,
            files=files,
            commit=commit,
            on_output=on_output,
            should_cancel=lambda: False,
        )
    except ApplicationError as exc:
        logger.info("Environment %s of repository %s not prepared: %s", key[:12], repository.pk, exc.message)


def environments_evict(*, keep: int | None = None) -> int:
    """Drop kept environments unused for ENVIRONMENT_MAX_AGE_DAYS, then the least
    recently used ones while all of them together are over ENVIRONMENT_CACHE_MAX_MB;
    the number dropped. Runs holding hard links of one keep their files."""
    now = timezone.now()
    ready = PreparedEnvironment.objects.filter(status=PreparedEnvironmentStatus.READY)
    if keep is not None:
        ready = ready.exclude(pk=keep)
    dropped = 0
    old = ready.filter(last_used_at__lt=now - timedelta(days=settings.ENVIRONMENT_MAX_AGE_DAYS))
    for prepared in old:
        dropped += _drop(prepared)
    limit = settings.ENVIRONMENT_CACHE_MAX_MB * 1024 * 1024
    total = (
        PreparedEnvironment.objects.filter(status=PreparedEnvironmentStatus.READY).aggregate(total=Sum("size_bytes"))[
            "total"
        ]
        or 0
    )
    for prepared in ready.order_by("last_used_at"):
        if total <= limit:
            break
        total -= prepared.size_bytes
        dropped += _drop(prepared)
    # Preparations whose worker died long ago.
    PreparedEnvironment.objects.filter(
        status=PreparedEnvironmentStatus.PREPARING,
        heartbeat_at__lt=now - timedelta(seconds=settings.ENVIRONMENT_SETUP_TIMEOUT_SECONDS + STALE_AFTER_SECONDS),
    ).update(status=PreparedEnvironmentStatus.FAILED, error="The worker preparing it stopped.")
    return dropped


def _drop(prepared: PreparedEnvironment) -> int:
    store.remove(store.prepared_folder(prepared.repository_id, prepared.key))
    return PreparedEnvironment.objects.filter(pk=prepared.pk, status=PreparedEnvironmentStatus.READY).delete()[0]


def environment_settings_update(
    *, repository: Repository, setup_script: str | None = None, tests_network: bool | None = None
) -> Repository:
    fields: dict[str, Any] = {}
    if setup_script is not None:
        text = setup_script.replace("\r\n", "\n").strip()
        if len(text) > MAX_SETUP_SCRIPT:
            raise ValidationError({"setup_script": [f"At most {MAX_SETUP_SCRIPT:,} characters."]})
        if "\x00" in text:
            raise ValidationError({"setup_script": ["The script contains a NUL character."]})
        fields["setup_script"] = text
    if tests_network is not None:
        fields["tests_network"] = bool(tests_network)
    for name, value in fields.items():
        setattr(repository, name, value)
    if fields:
        repository.save(update_fields=[*fields, "updated_at"])
    return repository
