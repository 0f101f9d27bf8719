"""A container image's root filesystem as the sandbox's ``/`` (core/sandbox.py).

A repository may name a base image (core/sandbox_images.py pulls and unpacks it); its
commands then run on the image's files instead of the server's ``/usr``. The image's
tree is bound read-only, one top-level entry at a time, rather than at ``/`` in one
piece: bwrap creates the mount points of everything it binds after it (``/workspace``,
``/etc/passwd``, a project's mounts, the Claude CLI's tools), and on a read-only tree
it cannot create a mount point that the image lacks. So ``/`` stays bwrap's own
(empty) root and ``/etc`` a folder of its own too, holding the image's ``/etc``
entry by entry except the few files the sandbox writes itself. The places the sandbox
makes (``/proc``, ``/dev``, ``/tmp``, the home, ``/workspace``) are never the image's.

This module reads only names and link targets in the unpacked tree (no file's
contents) and imports nothing of the sandbox's, which imports it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# Made by the sandbox itself in every command: an image's own are not shown.
SANDBOX_TOP_LEVEL = frozenset({"proc", "dev", "sys", "tmp", "home", "run", "workspace"})
SANDBOX_ETC = frozenset({"passwd", "group", "hosts", "hostname", "resolv.conf"})
HOST_CERTIFICATES = Path("/etc/ssl/certs")


@dataclass(frozen=True)
class ImageRoot:
    """An unpacked image: its tree (owned by the storage account, never written by a
    command), the manifest digest it was unpacked from, and its config's ``Env``."""

    reference: str
    digest: str
    rootfs: Path
    env: dict[str, str] = field(default_factory=dict, hash=False)


def image_filesystem_arguments(image: ImageRoot, *, share_network: bool) -> list[str]:
    """bwrap options that show ``image``'s tree read-only as the sandbox's filesystem.

    Links at the top level and in ``/etc`` become links inside (never bound: bwrap
    would follow them on the host). Where the image has no ``/etc/ssl`` and the command
    has the network (setup installs packages), the host's CA certificates are shown at
    ``/etc/ssl/certs``; an image with its own keeps its own (its TLS libraries expect
    its layout)."""
    args: list[str] = []
    etc = image.rootfs / "etc"
    for entry in sorted(os.scandir(image.rootfs), key=lambda entry: entry.name):
        if entry.name in SANDBOX_TOP_LEVEL or entry.name == "etc":
            continue
        args += _entry_arguments(entry, f"/{entry.name}")
    image_has_etc = etc.is_dir() and not etc.is_symlink()
    names: set[str] = set()
    if image_has_etc:
        for entry in sorted(os.scandir(etc), key=lambda entry: entry.name):
            if entry.name in SANDBOX_ETC:
                continue
            names.add(entry.name)
            args += _entry_arguments(entry, f"/etc/{entry.name}")
    if share_network and "ssl" not in names and HOST_CERTIFICATES.is_dir():
        args += ["--ro-bind", str(HOST_CERTIFICATES), str(HOST_CERTIFICATES)]
    return args


def _entry_arguments(entry: os.DirEntry[str], target: str) -> list[str]:
    if entry.is_symlink():
        return ["--symlink", os.readlink(entry.path), target]
    if entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
        return ["--ro-bind", entry.path, target]
    return []  # a device, socket or pipe in an image: nothing a command needs
