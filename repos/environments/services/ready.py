"""A run's environment: which one is in force at a commit, made ready in the run's
worktree (a kept one restored, else prepared now), changed when the run's change touches
a key file, restored again after a redone phase's clean-up; and the sandbox its test
command runs in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.utils import timezone

from core.sandbox import ProjectSandbox
from core.sandbox_images import image_root

from ...git import repository_read_access
from ...models import PreparedEnvironment, Repository
from .. import store
from ..keys import environment_key, key_files
from ..scripts import SetupScript, setup_in_force
from .preparing import prepared_environment_for


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
    from ...variables import project_sandbox_variables

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
    prepared, prepared_now = prepared_environment_for(
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
