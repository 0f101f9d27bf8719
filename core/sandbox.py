"""The sandbox every command that runs user or agent code goes through (bubblewrap).

A project's test command runs code its owner wrote and code an agent wrote: it is
treated as hostile. It runs in ``bwrap`` with new user, PID, IPC, UTS, network, cgroup
and mount namespaces. This module starts such commands (:func:`sandboxed_process`, a
shell command of a project's; :func:`sandboxed_program`, a program of the server's
own such as the Claude CLI; :func:`nested_sandbox_argv`, a sandbox inside one); the
parts are beside it:

- what the command sees — an empty root with the system's toolchains read-only, a
  private ``/tmp`` and home, the worktree at ``/workspace``, or a base image's tree
  (``ProjectSandbox.image``) — and its scrubbed environment: core/sandbox_bwrap.py,
  core/sandbox_rootfs.py, core/sandbox_images.py;
- who it runs as: uid/gid 65534 inside; outside, when the server runs as root, bwrap
  starts as a uid of its own from a pool: core/sandbox_accounts.py;
- the worktree handed to that account for the command and taken back afterwards (the
  storage account's again, no setuid bits, the ``.git`` pointer restored):
  core/sandbox_handover.py; git inside, read-only: core/sandbox_git.py;
- memory, processes and disk limited per command, CPU time and file size per process
  (core/sandbox_limits.py, core/sandbox_cgroups.py); the wall-clock timeout and cancel
  kill bwrap, which takes the whole PID namespace with it;
- bwrap is started from an empty environment (bwrap is PID 1 inside, and its
  ``/proc/1/environ`` is readable from inside), and reads its options from a pipe
  (``--args``), so that its command line — PID 1's ``/proc/1/cmdline`` inside — names
  no path of the server's;
- it fails closed: nothing starts where no sandbox can be made (core/sandbox_probe.py).

git and the image tools run confined too, as the storage account: core/sandbox_confined.py.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from django.conf import settings

from core.exceptions import SandboxUnavailable
from core.sandbox_accounts import as_account
from core.sandbox_bwrap import SANDBOX_ROOT, SYSTEM_PATH, base_environment, bwrap_arguments, bwrap_path
from core.sandbox_git import REPOSITORY_INSIDE, WORKTREE_INSIDE
from core.sandbox_handover import workspace_prepared
from core.sandbox_limits import CommandLimits, LimitedProcess
from core.sandbox_probe import sandbox_status
from core.sandbox_rootfs import ImageRoot

SANDBOX_DISABLED_WARNING = (
    "[sandbox: DISABLED by UNSAFE_RUN_TESTS_WITHOUT_SANDBOX — this command runs as the server's own user "
    "and can read its files and secrets]\n"
)
IMAGE_NEEDS_SANDBOX = (
    "This repository's commands run on a base image ({reference}), which only the sandbox can show them: with "
    "UNSAFE_RUN_TESTS_WITHOUT_SANDBOX they would run on the server's own files instead. Nothing was run."
)


@dataclass(frozen=True)
class Limits:
    memory_mb: int
    cpu_seconds: int
    file_size_mb: int
    processes: int
    tmp_size_mb: int
    disk_mb: int = 0  # what a command may add to its worktree; 0: not watched


@dataclass(frozen=True)
class ProjectSandbox:
    """How one project's commands (its setup script, its test command) run besides
    their worktree and limits (repos/environments/ builds it): the project's variables in
    the command's environment, the network for setup (or tests a project opted in), and
    folders of the project's own bound inside (its package cache)."""

    variables: tuple[tuple[str, str], ...] = ()
    share_network: bool = False
    # (folder on the host, place inside): writable, handed to the command's account.
    mounts: tuple[tuple[Path, str], ...] = ()
    # A container image whose tree the commands run on instead of the server's /usr
    # (core/sandbox_images.py `image_root`); None: the server's own.
    image: ImageRoot | None = None
    # The worktree's restored environments (relative paths: ".venv", "node_modules"):
    # their files are hard links nobody is handed, so handing the worktree over and
    # taking it back need not look at them (core/sandbox_handover.py).
    kept: tuple[str, ...] = ()


NO_PROJECT = ProjectSandbox()


def limits_from_settings() -> Limits:
    return Limits(
        memory_mb=settings.VERIFY_MEMORY_MB,
        cpu_seconds=settings.VERIFY_CPU_SECONDS,
        file_size_mb=settings.SANDBOX_FILE_SIZE_MB,
        processes=settings.SANDBOX_MAX_PROCESSES,
        tmp_size_mb=settings.SANDBOX_TMP_SIZE_MB,
        disk_mb=settings.SANDBOX_DISK_MB,
    )


@contextlib.contextmanager
def sandboxed_process(
    *, command: str, workspace: Path, limits: Limits, project: ProjectSandbox = NO_PROJECT
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``/bin/sh -c command`` in the sandbox with ``workspace`` as its working
    folder, as ``project`` says (variables, network, mounts); stdout and stderr together
    on ``process.stdout``. The caller reads it and ends the process (``process_kill``);
    leaving the block takes the worktree back.

    Raises SandboxUnavailable (nothing started) where no sandbox can be made."""
    status = sandbox_status()
    if not status.available:
        raise SandboxUnavailable(status.message)
    if status.disabled:
        with _unsandboxed_process(command=command, workspace=workspace, limits=limits, project=project) as process:
            yield process
        return
    with _bwrapped(
        argv=["/bin/sh", "-c", command],
        workspace=workspace,
        limits=limits,
        environment=command_environment(project),
        share_network=project.share_network,
        writable=project.mounts,
        stderr=subprocess.STDOUT,
        image=project.image,
        kept=project.kept,
    ) as process:
        yield process


def command_environment(project: ProjectSandbox = NO_PROJECT) -> dict[str, str]:
    """A project command's environment: the image's ``Env`` (its PYTHON_VERSION…), then
    the project's variables, then ours: neither the image nor the project replaces what
    makes the sandbox work (home, temporary folder, PATH with the worktree's tools first)."""
    image_env = project.image.env if project.image is not None else {}
    return {**image_env, **dict(project.variables), **base_environment(project.image)}


@contextlib.contextmanager
def sandboxed_program(
    *,
    argv: list[str],
    workspace: Path,
    limits: Limits,
    environment: dict[str, str],
    share_network: bool = False,
    read_only: tuple[Path, ...] = (),
    writable: tuple[tuple[Path, str], ...] = (),
    stdin: IO[bytes] | None = None,
    stderr: int | IO[bytes] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` in the sandbox with ``workspace`` as its working folder
    (``/workspace``) and only ``environment``: a program of the server's own (the Claude
    CLI), not a shell command. ``share_network`` keeps the host's network (the program
    talks to an API); ``read_only`` paths are bound at the same place read-only (the
    program itself), ``writable`` folders at the given places inside, handed to the
    sandbox's account like the worktree. stdout is piped; stdin comes from ``stdin``
    (default: nothing), stderr goes to ``stderr``.
    The caller reads, then ends the process (``process_kill``); leaving the block takes
    the worktree back.

    Raises SandboxUnavailable (nothing started) where no sandbox can be made or the
    operator turned it off: the caller decides whether to run without."""
    status = sandbox_status()
    if not status.available or status.disabled:
        raise SandboxUnavailable(status.message or status.reason)
    with _bwrapped(
        argv=argv,
        workspace=workspace,
        limits=limits,
        environment=environment,
        share_network=share_network,
        read_only=read_only,
        writable=writable,
        stdin=stdin,
        stderr=stderr,
    ) as process:
        yield process


@contextlib.contextmanager
def _bwrapped(
    *,
    argv: list[str],
    workspace: Path,
    limits: Limits,
    environment: dict[str, str],
    share_network: bool = False,
    read_only: tuple[Path, ...] = (),
    writable: tuple[tuple[Path, str], ...] = (),
    stdin: IO[bytes] | None = None,
    stderr: int | IO[bytes] | None = None,
    image: ImageRoot | None = None,
    kept: tuple[str, ...] = (),
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` started in bwrap as :func:`sandboxed_program` describes, once the caller
    has checked that a sandbox can be made; on ``image``'s tree when one is given."""
    bwrap = bwrap_path()
    assert bwrap is not None
    with workspace_prepared(workspace, tuple(source for source, _ in writable), kept=kept) as (support, ids, marks):
        arguments = bwrap_arguments(
            workspace,
            support,
            limits.tmp_size_mb,
            share_network=share_network,
            read_only=read_only,
            writable=writable,
            environment=environment,
            image=image,
        )
        account = as_account(ids)
        # The limits' cgroup is joined before bwrap reads its options (--args), so before it
        # can start anything (core/sandbox_limits.py). prlimit (as the server: it may
        # raise limits), then setpriv to the command's account, then bwrap: one pid.
        with CommandLimits(limits, watched=(workspace, *(source for source, _ in writable)), kept_marks=marks) as guard:
            options = guard.gate_fd()
            process = LimitedProcess(  # user code or a fixed program, in the sandbox described above
                guard.argv([*account, bwrap, "--args", str(options), *argv]),
                env={},
                stdin=subprocess.DEVNULL if stdin is None else stdin,
                stdout=subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
                pass_fds=(options,),
            )
            guard.start(process, gate=arguments)
            try:
                yield process
            finally:
                process_kill(process)


@contextlib.contextmanager
def _unsandboxed_process(
    *, command: str, workspace: Path, limits: Limits, project: ProjectSandbox
) -> Iterator[subprocess.Popen[bytes]]:
    """The operator's explicit opt-out: limits and a scrubbed environment only. A base
    image is refused: without the sandbox nothing can show its files in place of the
    server's, and running on the server's instead would pass off its toolchain as the
    image's."""
    if project.image is not None:
        raise SandboxUnavailable(IMAGE_NEEDS_SANDBOX.format(reference=project.image.reference))
    home = tempfile.mkdtemp(prefix="autocoder-unsandboxed-")
    environment = {
        **dict(project.variables),
        **base_environment(),
        "HOME": home,
        "TMPDIR": home,
        "PATH": f"{workspace}/.venv/bin:{workspace}/node_modules/.bin:{SYSTEM_PATH}",
    }
    try:
        # rlimits and the disk watcher only: no cgroup (nothing holds the shell back
        # until it has joined one).
        with CommandLimits(limits, watched=(workspace,), cgroups=False) as guard:
            process = LimitedProcess(  # the operator turned the sandbox off
                guard.argv(["/bin/sh", "-c", command]),
                cwd=workspace,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            guard.start(process)
            try:
                yield process
            finally:
                process_kill(process)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def process_kill(process: subprocess.Popen[bytes]) -> None:
    """End the command and everything it started: bwrap is PID 1 of the sandbox's PID
    namespace, so killing its group ends every process in it."""
    import signal

    # Only while it has not been waited for: a reaped process's pid (and group id) is
    # free for the next process the host starts, and pids come round quickly
    # (pid_max is 32768 on many hosts; every git command here starts four).
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def nested_sandbox_argv(argv: list[str], *, tmp_size_mb: int, image: ImageRoot | None = None) -> list[str]:
    """``argv`` in a sandbox made from inside one that :func:`sandboxed_program` started
    (bwrap nests: user namespaces are allowed inside one): the outer sandbox may share
    the host's network and hold a program's login (the Claude CLI's), the inner one has
    no network, a fresh ``/tmp`` and home, only ``/usr``, the outer sandbox's few
    ``/etc`` files and ``/workspace``, and the test command's environment. bwrap starts
    from an empty environment (``env -i``): the outer program's, its API key or token
    included, is not passed on, and its processes are not in the inner PID namespace.
    bwrap is the server's (``argv[2]``): the outer sandbox must see it (``/usr`` is bound;
    elsewhere the caller binds it in). With ``image`` the inner sandbox runs on the
    image's tree with its environment (as :func:`sandboxed_process` would): the outer
    sandbox must show ``image.rootfs`` at its own path, read-only."""
    arguments = bwrap_arguments(
        Path(SANDBOX_ROOT),
        Path("/etc"),
        tmp_size_mb,
        image=image,
        environment=command_environment(ProjectSandbox(image=image)),
    )
    # The outer sandbox's read-only git view, where it has one (core/sandbox_git.py): the
    # inner /workspace carries its .git pointer, these are where it points.
    for place in (REPOSITORY_INSIDE, WORKTREE_INSIDE):
        arguments += ["--ro-bind-try", place, place]
    return ["/usr/bin/env", "-i", bwrap_path() or "/usr/bin/bwrap", *arguments, *argv]
