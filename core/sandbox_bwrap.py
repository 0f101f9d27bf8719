"""bwrap's options for one sandboxed command: the filesystem it sees, who it is inside,
its environment.

The filesystem is an empty root with the system's toolchains (``/usr`` and the
usr-merge links) read-only, a few harmless files of ``/etc`` read-only, a private
``/tmp`` and home (size-capped tmpfs), and the run's worktree read-write at
``/workspace`` — nothing else: no other repository, no database file, no unix socket,
no ``/proc`` of any process outside the sandbox. A project with a base image sees the
image's tree instead of the system's ``/usr`` and ``/etc`` files (core/sandbox_rootfs.py).
Inside, the command is uid/gid 65534 with no capabilities, its own ``/etc/passwd`` and
friends (the support files), and a ``.git`` pointer of ours (core/sandbox_git.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from django.conf import settings

from core.sandbox_git import git_view_arguments
from core.sandbox_rootfs import ImageRoot, image_filesystem_arguments

SANDBOX_ROOT = "/workspace"
SANDBOX_HOME = "/home/sandbox"
SANDBOX_TMP = "/tmp"  # noqa: S108 - the sandbox's own tmpfs, not the host's
SANDBOX_INSIDE_ID = 65534
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Read-only from the host: the toolchains under /usr, and of /etc only files that
# programs need to start and hold no secrets (no passwd, no shadow, no service configs).
USR_MERGE_LINKS = (("usr/bin", "/bin"), ("usr/sbin", "/sbin"), ("usr/lib", "/lib"), ("usr/lib64", "/lib64"))
ETC_READ_ONLY = (
    "alternatives",
    "ca-certificates",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "mime.types",
    "nsswitch.conf",
    "java-17-openjdk",
    "os-release",
    "debian_version",
)
PROBE_TTL_SECONDS = 60.0
GIT_POINTER_FILE = "git-pointer"
NEUTRAL_GIT_POINTER = "gitdir: /repository-not-available-in-the-sandbox\n"


def bwrap_path() -> str | None:
    configured = settings.SANDBOX_BWRAP
    found = shutil.which(configured) if os.sep not in configured else configured
    return found if found and os.access(found, os.X_OK) else None


def base_environment(image: ImageRoot | None = None) -> dict[str, str]:
    """The variables every sandboxed command gets, after the image's and the project's.
    On an image, its PATH (where its toolchain is) replaces the system's."""
    system_path = (image.env.get("PATH") if image is not None else None) or SYSTEM_PATH
    return {
        # What setup installed comes first, as on a developer's machine with the
        # virtualenv activated (repos/environments/).
        "PATH": f"{SANDBOX_ROOT}/.venv/bin:{SANDBOX_ROOT}/node_modules/.bin:{system_path}",
        "HOME": SANDBOX_HOME,
        "TMPDIR": SANDBOX_TMP,
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "CI": "true",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }


def bwrap_arguments(
    workspace: Path | None,
    support: Path,
    tmp_size_mb: int,
    *,
    share_network: bool = False,
    read_only: tuple[Path, ...] = (),
    writable: tuple[tuple[Path, str], ...] = (),
    environment: dict[str, str] | None = None,
    chdir: Path | None = None,
    image: ImageRoot | None = None,
) -> list[str]:
    """bwrap's options. ``workspace`` is bound at ``/workspace`` and is the working
    folder; without one (git, core/sandbox_confined.py) the ``writable`` and ``read_only``
    folders are all there is, at their own paths, and ``chdir`` the working folder.
    With ``image`` its tree is the filesystem instead of the host's ``/usr`` and
    ``/etc`` files (core/sandbox_rootfs.py); the rest is the same."""
    args = [
        "--unshare-all",
        *(["--share-net"] if share_network else []),
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--uid",
        str(SANDBOX_INSIDE_ID),
        "--gid",
        str(SANDBOX_INSIDE_ID),
        "--hostname",
        "sandbox",
        "--cap-drop",
        "ALL",
    ]
    if image is not None:
        args += image_filesystem_arguments(image, share_network=share_network)
    else:
        args += _host_filesystem_arguments()
    if share_network and Path("/etc/resolv.conf").exists():
        args += ["--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"]
    for name in ("passwd", "group", "hostname", "hosts"):
        args += ["--ro-bind", str(support / name), f"/etc/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    tmp_bytes = str(tmp_size_mb * 1024 * 1024)
    args += ["--size", tmp_bytes, "--tmpfs", SANDBOX_TMP, "--size", tmp_bytes, "--tmpfs", SANDBOX_HOME]
    for path in read_only:
        args += ["--ro-bind", str(path), str(path)]
    for source, target in writable:
        args += ["--bind", str(source), target]
    if workspace is not None:
        args += ["--bind", str(workspace), SANDBOX_ROOT, "--chdir", SANDBOX_ROOT]
        # The worktree's .git pointer names the repository's place on the server (and
        # git could not reach it here anyway): the command sees a neutral one, read-only,
        # which it can neither replace nor link under another name.
        # Where the worktree belongs to a repository under REPOS_ROOT, git works there
        # read-only, through a view that names no server path (core/sandbox_git.py).
        pointer = workspace / ".git"
        neutral = support / GIT_POINTER_FILE
        view = git_view_arguments(workspace, support, SANDBOX_ROOT)
        if view is not None:
            args += view
        elif neutral.is_file() and pointer.is_file() and not pointer.is_symlink():
            args += ["--ro-bind", str(neutral), f"{SANDBOX_ROOT}/.git"]
    elif chdir is not None:
        args += ["--chdir", str(chdir)]
    for name, value in (base_environment() if environment is None else environment).items():
        args += ["--setenv", name, value]
    return args


def _host_filesystem_arguments() -> list[str]:
    """The host's toolchains (``/usr`` and the usr-merge links) and harmless ``/etc``
    files, read-only."""
    args = ["--ro-bind", "/usr", "/usr"]
    for target, link in USR_MERGE_LINKS:
        if Path(link).is_symlink() or not Path(link).exists():
            if Path("/", target).exists():
                args += ["--symlink", target, link]
        else:
            # Not a usr-merged system: the real folder, read-only.
            args += ["--ro-bind", link, link]
    for name in ETC_READ_ONLY:
        source = Path("/etc", name)
        if source.exists():
            args += ["--ro-bind", str(source), str(source)]
    return args


def support_files_write(directory: Path) -> None:
    """/etc/passwd and friends for the sandbox: its own user only, nothing of the host's."""
    inside = SANDBOX_INSIDE_ID
    files = {
        "passwd": f"sandbox:x:{inside}:{inside}:sandbox:{SANDBOX_HOME}:/bin/sh\n",
        "group": f"sandbox:x:{inside}:\n",
        "hostname": "sandbox\n",
        "hosts": "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost\n",
        GIT_POINTER_FILE: NEUTRAL_GIT_POINTER,
    }
    for name, content in files.items():
        (directory / name).write_text(content)
        (directory / name).chmod(0o644)
    directory.chmod(0o755)
