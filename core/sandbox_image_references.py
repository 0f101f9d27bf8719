"""What a repository's base image reference names (core/sandbox_images.py pulls and
unpacks it), checked where it is set.

A reference is either an image in a registry (``python:3.12-slim``,
``ghcr.io/owner/image:tag``, ``…@sha256:…``; ``docker://`` in front is allowed) or an
operator's local OCI layout, ``oci:<path>:<tag>`` (a path relative to
``IMAGES_LOCAL_ROOT``, or an absolute one under it or under ``REPOS_ROOT``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from core.exceptions import ApplicationError

MAX_REFERENCE_LENGTH = 500
DEFAULT_REGISTRY = "docker.io"
# Docker Hub's registry answers at another name than the one images are called by.
REGISTRY_HOSTS = {"docker.io": "registry-1.docker.io"}

BAD_REFERENCE = (
    "Give an image as name[:tag][@sha256:digest] (e.g. python:3.12-slim, ghcr.io/owner/image:tag) or a local "
    "OCI layout as oci:<path>:<tag>."
)
REFERENCE_TOO_LONG = f"An image reference has at most {MAX_REFERENCE_LENGTH} characters."
LAYOUT_OUTSIDE = (
    "A local OCI layout must be a folder under the server's image layouts folder (IMAGES_LOCAL_ROOT: give a "
    "path relative to it) or under its repositories folder."
)

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
_REGISTRY_REFERENCE = re.compile(
    rf"(?:(?P<domain>{_HOST}(?::[0-9]{{1,5}})?)/)?"
    rf"(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?"
)
_PATH_COMPONENT = re.compile(_COMPONENT)
_LAYOUT_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class ImageUnavailable(ApplicationError):
    """The image cannot be used: what the user or operator can do about it is said."""

    code = "image_unavailable"


class ImageReferenceInvalid(ImageUnavailable):
    code = "image_reference_invalid"


@dataclass(frozen=True)
class ImageSource:
    """A parsed reference: a registry image (``registry``, fully qualified as skopeo's
    ``docker://`` takes it) or a local layout (``layout``, resolved, and ``tag``)."""

    reference: str
    registry: str = ""
    layout: Path | None = None
    tag: str = ""

    @property
    def registry_host(self) -> tuple[str, int]:
        """The host and port a pull connects to (for the server's address checks)."""
        domain = self.registry.split("/", 1)[0]
        host, _, port = domain.partition(":")
        return REGISTRY_HOSTS.get(host, host), int(port) if port else 443


def parse_image_reference(reference: str) -> ImageSource:
    """What ``reference`` names; ImageReferenceInvalid with the reason when it names
    nothing usable (a malformed name, a layout outside the allowed folders)."""
    reference = reference.strip()
    if len(reference) > MAX_REFERENCE_LENGTH:
        raise ImageReferenceInvalid(REFERENCE_TOO_LONG)
    if reference.startswith("oci:"):
        return _local_layout(reference)
    name = reference.removeprefix("docker://")
    match = _REGISTRY_REFERENCE.fullmatch(name)
    if match is None:
        raise ImageReferenceInvalid(BAD_REFERENCE)
    domain, path = match["domain"], match["path"]
    # As docker reads a name: the first part is a registry only if it looks like a host.
    if domain and not ("." in domain or ":" in domain or domain == "localhost"):
        path, domain = f"{domain}/{path}", None
        if not all(_PATH_COMPONENT.fullmatch(part) for part in path.split("/")):
            raise ImageReferenceInvalid(BAD_REFERENCE)
    domain = domain or DEFAULT_REGISTRY
    if domain == DEFAULT_REGISTRY and "/" not in path:
        path = f"library/{path}"
    # A digest pins the image (skopeo refuses a tag beside it); no tag means latest.
    if match["digest"]:
        qualified = f"{domain}/{path}@{match['digest']}"
    else:
        qualified = f"{domain}/{path}:{match['tag'] or 'latest'}"
    return ImageSource(reference=reference, registry=qualified)


def _local_layout(reference: str) -> ImageSource:
    path, _, tag = reference.removeprefix("oci:").rpartition(":")
    # skopeo and umoci split `path:tag` at a colon: a path holding one is ambiguous.
    if not path or ":" in path or "\x00" in path or "\n" in path or not _LAYOUT_TAG.fullmatch(tag):
        raise ImageReferenceInvalid(BAD_REFERENCE)
    local_root = Path(os.path.realpath(settings.IMAGES_LOCAL_ROOT))
    repos_root = Path(os.path.realpath(settings.REPOS_ROOT))
    given = Path(path)
    resolved = Path(os.path.realpath(given if given.is_absolute() else local_root / given))
    if local_root not in resolved.parents and repos_root not in resolved.parents:
        raise ImageReferenceInvalid(LAYOUT_OUTSIDE)
    return ImageSource(reference=reference, layout=resolved, tag=tag)
