"""Running a setup script: in the sandbox at the root of a worktree, with the network
(the one step that has it, unless a project opts its tests in), the repository's
package cache at ``/cache``, the project's variables, its own time and disk limits, its
output streamed as it comes (each command echoed first: the progress a person sees)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from core.masking import OutputMasker
from core.sandbox import Limits, ProjectSandbox, limits_from_settings
from core.sandbox_rootfs import ImageRoot

from ..verify import VerifyResult, run_test_command

PACKAGE_CACHE = "/cache"
# Where package managers keep their downloads: the repository's cache, so a second
# setup (a lockfile changed, a rebuild) fetches only what is new.
CACHE_VARIABLES = (
    ("PIP_CACHE_DIR", f"{PACKAGE_CACHE}/pip"),
    ("UV_CACHE_DIR", f"{PACKAGE_CACHE}/uv"),
    ("POETRY_CACHE_DIR", f"{PACKAGE_CACHE}/poetry"),
    ("npm_config_cache", f"{PACKAGE_CACHE}/npm"),
    ("YARN_CACHE_FOLDER", f"{PACKAGE_CACHE}/yarn"),
    ("PNPM_STORE_DIR", f"{PACKAGE_CACHE}/pnpm"),
    ("XDG_CACHE_HOME", f"{PACKAGE_CACHE}/xdg"),
    ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    ("npm_config_update_notifier", "false"),
    ("npm_config_fund", "false"),
    ("npm_config_audit", "false"),
)


def setup_limits() -> Limits:
    base = limits_from_settings()
    return Limits(
        memory_mb=base.memory_mb,
        cpu_seconds=max(base.cpu_seconds, settings.ENVIRONMENT_SETUP_TIMEOUT_SECONDS),
        file_size_mb=base.file_size_mb,
        processes=base.processes,
        tmp_size_mb=base.tmp_size_mb,
        disk_mb=settings.ENVIRONMENT_SETUP_DISK_MB,
    )


def setup_command(script: str) -> str:
    """The script under ``sh -e -x`` (bash when its first line asks for it): it stops
    at the first command that fails, and says each command as it starts."""
    first_line = script.lstrip().split("\n", 1)[0]
    shell = "bash" if first_line.startswith("#!") and "bash" in first_line else "sh"
    return f"{shell} -e -x -c {shlex.quote(script)}"


def run_setup(
    *,
    script: str,
    worktree: Path,
    cache: Path,
    variables: tuple[tuple[str, str], ...],
    masker: OutputMasker,
    image: ImageRoot | None,
    on_output: Callable[[str], None],
    should_cancel: Callable[[], bool],
) -> VerifyResult:
    """Run ``script`` in ``worktree`` with the project's ``variables``, its secrets
    masked (``masker``) in everything it prints. Raises SandboxUnavailable (nothing
    started) where no sandbox can be made."""
    project = ProjectSandbox(
        variables=(*variables, *CACHE_VARIABLES),
        share_network=True,
        mounts=((cache, PACKAGE_CACHE),),
        image=image,
    )
    return run_test_command(
        command=setup_command(script),
        cwd=worktree,
        timeout=settings.ENVIRONMENT_SETUP_TIMEOUT_SECONDS,
        limits=setup_limits(),
        max_output_chars=settings.VERIFY_OUTPUT_MAX_CHARS,
        max_streamed_chars=settings.VERIFY_STREAM_MAX_CHARS,
        on_output=on_output,
        should_cancel=should_cancel,
        project=project,
        masker=masker,
    )
