"""A repository's base image: pulled, unpacked once per manifest digest, shown to its
commands by the sandbox (core/sandbox.py, ``ProjectSandbox.image``). What a reference
may name, and how it is read: core/sandbox_image_references.py.

Everything an image holds is untrusted: its manifests and config (JSON a registry
chose), its layers (tar archives that may hold links out, device files, setuid
programs, paths with ``..``), a local layout's own links. So neither skopeo (the pull,
the inspection) nor umoci (the unpacking) runs with the server's rights: each runs
through :func:`core.sandbox_confined.run_confined`, as the storage account, seeing only the
layout it reads and the folder it writes (the network only for the pull). The server
itself only parses skopeo's JSON answer and lists names in the unpacked tree.

The cache, under ``IMAGES_ROOT``:

- ``pulled/<key>/layout``: an OCI layout per registry reference (skopeo's copy), and
  ``pulled/<key>.json``, the digest it resolved to. A tag is pulled once; ``refresh``
  pulls it again (a moved tag gives a new digest, unpacked beside the old one).
- ``<hex of the manifest digest>/rootfs``: the unpacked tree (``image.json`` beside it
  holds the image's ``Env``). Unpacked into a temporary folder and renamed into place
  under a lock file, so that concurrent callers unpack it once and never see half of
  it; setuid and setgid bits are taken off before the rename.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from core.exceptions import SandboxUnavailable
from core.sandbox_bwrap import SYSTEM_PATH
from core.sandbox_confined import Confinement, run_confined
from core.sandbox_image_references import ImageSource, ImageUnavailable, parse_image_reference
from core.sandbox_probe import sandbox_status
from core.sandbox_rootfs import ImageRoot

PULLED_TAG = "image"
IMAGE_RECORD = "image.json"
INSPECT_TIMEOUT_SECONDS = 60
MAX_ENV_VARIABLES = 256

TOOLS_MISSING = (
    "Base images need skopeo and umoci on the server ({missing} not found; Debian/Ubuntu: apt-get install skopeo "
    "umoci)."
)
NEEDS_SANDBOX = (
    "Base images run only in the sandbox, and the operator turned it off (UNSAFE_RUN_TESTS_WITHOUT_SANDBOX)."
)
PULL_FAILED = "The image {reference} could not be pulled: {reason}"
PULL_TIMED_OUT = "Pulling the image {reference} took more than {seconds} s (IMAGE_PULL_TIMEOUT_SECONDS)."
NO_SUCH_TAG = "The OCI layout {path} has no image tagged {tag}."
LAYOUT_UNREADABLE = "The image {reference} could not be read: {reason}"
UNPACK_FAILED = "The image {reference} could not be unpacked: {reason}"
BAD_IMAGE = "The image {reference} is not one the server can use: {reason}"
IMAGES_UNREACHABLE = (
    "The sandbox's accounts cannot reach IMAGES_ROOT: every folder above it must be searchable by them (chmod o+x)."
)

_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LOG_MESSAGE = re.compile(r'msg="((?:[^"\\]|\\.)*)"')


# --- Resolving and unpacking ---------------------------------------------------------


@dataclass(frozen=True)
class _Tools:
    skopeo: str
    umoci: str

    def visible_folders(self) -> tuple[Path, ...]:
        """Their folders where the confinement does not already show them (only /usr)."""
        folders = {Path(tool).parent for tool in (self.skopeo, self.umoci) if not tool.startswith("/usr/")}
        return tuple(sorted(folders))


def image_root(reference: str, *, refresh: bool = False) -> ImageRoot:
    """The unpacked tree of the image ``reference`` names, pulled and unpacked if it is
    not yet (``refresh``: a registry tag is pulled again, to follow where it moved).

    Raises ImageUnavailable (with what to do), or SandboxUnavailable where no sandbox
    can be made (nothing of an image is read outside one)."""
    source = parse_image_reference(reference)
    status = sandbox_status()
    if status.disabled:
        raise ImageUnavailable(NEEDS_SANDBOX)
    if not status.available:
        raise SandboxUnavailable(status.message)
    root = _images_root()
    if source.layout is None:
        known = _known_pull(root, source)
        if known is not None and not refresh:
            return known
        tools = _tools()
        layout, tag, inspected = _pulled_layout(root, source, tools, refresh=refresh)
    else:
        tools = _tools()
        layout, tag, inspected = source.layout, source.tag, None
    digest, env = inspected or _inspect(source, layout, tag, tools)
    return _unpacked(root, source, layout, tag, digest, env, tools)


def pull_origin(source: ImageSource) -> tuple[str, tuple[Path, ...]]:
    """Where skopeo copies a registry image from, and the folders it reads there (none:
    it is on the network)."""
    return f"docker://{source.registry}", ()


def pull_argv(skopeo: str, origin: str, layout: Path, scratch: Path) -> list[str]:
    """skopeo's copy of an image into the cache's layout for it. No signature policy is
    read (the confinement shows no /etc/containers): the image is trusted as far as its
    registry's TLS and, with @sha256:…, its digest go."""
    return [
        skopeo,
        "--insecure-policy",
        "--tmpdir",
        str(scratch),
        "copy",
        "--retry-times",
        "2",
        origin,
        f"oci:{layout}:{PULLED_TAG}",
    ]


def _images_root() -> Path:
    root = Path(os.path.realpath(settings.IMAGES_ROOT))
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # the sandboxes' accounts search it to reach a rootfs
    if os.geteuid() == 0 and not _searchable_by_everyone(root):
        raise ImageUnavailable(IMAGES_UNREACHABLE)
    return root


def _searchable_by_everyone(path: Path) -> bool:
    # The pool's uids own nothing here: they search folders as "others".
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in [path, *path.parents])


def _tools() -> _Tools:
    found = {name: shutil.which(name) for name in ("skopeo", "umoci")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise ImageUnavailable(TOOLS_MISSING.format(missing=" and ".join(missing)))
    return _Tools(skopeo=os.path.realpath(found["skopeo"] or ""), umoci=os.path.realpath(found["umoci"] or ""))


def _pull_key(source: ImageSource) -> str:
    return hashlib.sha256(source.registry.encode()).hexdigest()[:32]


def _pull_record(root: Path, source: ImageSource) -> Path:
    return root / "pulled" / f"{_pull_key(source)}.json"


def _known_pull(root: Path, source: ImageSource) -> ImageRoot | None:
    """A registry reference pulled and unpacked before: no subprocess, no network."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        digest = json.loads(_pull_record(root, source).read_text())["digest"]
        if _DIGEST.fullmatch(digest):
            return _read_unpacked(root, source, digest)
    return None


def _read_unpacked(root: Path, source: ImageSource, digest: str) -> ImageRoot | None:
    folder = root / digest.removeprefix("sha256:")
    try:
        record = json.loads((folder / IMAGE_RECORD).read_text())
    except (OSError, ValueError):
        return None
    env = record.get("env") if isinstance(record, dict) else None
    if not isinstance(env, dict):
        return None
    return ImageRoot(reference=source.reference, digest=digest, rootfs=folder / "rootfs", env=env)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Held by one caller at a time on this host (threads and processes alike)."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pulled_layout(
    root: Path, source: ImageSource, tools: _Tools, *, refresh: bool
) -> tuple[Path, str, tuple[str, dict[str, str]] | None]:
    """The cache's layout of a registry image, pulled unless it was (or ``refresh``),
    and what a pull just now found in it (its digest and Env). The record of the digest
    is written under the same lock: a caller that waited for a pull does not pull again."""
    key = _pull_key(source)
    area = root / "pulled" / key
    layout = area / "layout"
    with _locked(root / "locks" / f"pull-{key}.lock"):
        if not refresh and _pull_record(root, source).exists() and layout.is_dir():
            return layout, PULLED_TAG, None
        _pull(source, area, layout, tools)
        digest, env = _inspect(source, layout, PULLED_TAG, tools)
        _write_json(_pull_record(root, source), {"reference": source.registry, "digest": digest})
    return layout, PULLED_TAG, (digest, env)


def _pull(source: ImageSource, area: Path, layout: Path, tools: _Tools) -> None:
    scratch = area / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    origin, origin_folders = pull_origin(source)
    try:
        result = run_confined(
            pull_argv(tools.skopeo, origin, layout, scratch),
            cwd=area,
            confinement=Confinement(
                writable=(area,), read_only=(*origin_folders, *tools.visible_folders()), share_network=True
            ),
            environment={"PATH": SYSTEM_PATH},
            timeout=settings.IMAGE_PULL_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise ImageUnavailable(
            PULL_TIMED_OUT.format(reference=source.reference, seconds=settings.IMAGE_PULL_TIMEOUT_SECONDS)
        ) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if result.returncode != 0:
        reason = _reason(result.stderr, hide=area)
        raise ImageUnavailable(PULL_FAILED.format(reference=source.reference, reason=reason))


def _inspect(source: ImageSource, layout: Path, tag: str, tools: _Tools) -> tuple[str, dict[str, str]]:
    """The manifest digest and the config's Env of ``layout:tag``, as skopeo reads them
    (confined: a local layout may be a user's files)."""
    try:
        result = run_confined(
            [tools.skopeo, "inspect", f"oci:{layout}:{tag}"],
            cwd=layout,
            confinement=Confinement(read_only=(layout, *tools.visible_folders())),
            environment={"PATH": SYSTEM_PATH},
            timeout=INSPECT_TIMEOUT_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise ImageUnavailable(
            LAYOUT_UNREADABLE.format(reference=source.reference, reason="skopeo timed out")
        ) from None
    if result.returncode != 0:
        stderr = result.stderr.decode("utf-8", errors="replace")
        if "no descriptor found for reference" in stderr:
            raise ImageUnavailable(NO_SUCH_TAG.format(path=_shown_path(source, layout), tag=tag))
        reason = _reason(result.stderr, hide=None if source.layout else layout.parent)
        raise ImageUnavailable(LAYOUT_UNREADABLE.format(reference=source.reference, reason=reason))
    try:
        answer = json.loads(result.stdout)
        digest = answer["Digest"]
        variables = answer.get("Env") or []
    except (ValueError, KeyError, TypeError):
        raise ImageUnavailable(BAD_IMAGE.format(reference=source.reference, reason="skopeo's answer")) from None
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ImageUnavailable(BAD_IMAGE.format(reference=source.reference, reason="its digest is not sha256"))
    return digest, _image_env(variables)


def _image_env(variables: object) -> dict[str, str]:
    """The image's ``Env`` as variables bwrap can set (``--setenv`` takes a name and a
    value without NUL); anything else in it is left out."""
    env: dict[str, str] = {}
    if not isinstance(variables, list):
        return env
    for item in variables[:MAX_ENV_VARIABLES]:
        if not isinstance(item, str) or "=" not in item or "\x00" in item:
            continue
        name, _, value = item.partition("=")
        if _VARIABLE_NAME.fullmatch(name):
            env[name] = value
    return env


def _unpacked(
    root: Path, source: ImageSource, layout: Path, tag: str, digest: str, env: dict[str, str], tools: _Tools
) -> ImageRoot:
    found = _read_unpacked(root, source, digest)
    if found is not None:
        return found
    with _locked(root / "locks" / f"{digest.removeprefix('sha256:')}.lock"):
        # Another caller may have unpacked it while this one waited.
        found = _read_unpacked(root, source, digest)
        if found is not None:
            return found
        _unpack(root, source, layout, tag, digest, env, tools)
    found = _read_unpacked(root, source, digest)
    assert found is not None
    return found


# Unpacked as the storage account, without the ownership an image asks for (--rootless:
# everything becomes the account's); then no file keeps a setuid or setgid bit.
_UNPACK_SCRIPT = (
    '"$1" unpack --rootless --image "$2" "$3" >&2 && find "$3/rootfs" ! -type l -perm /6000 -exec chmod ug-s {} +'
)


def _unpack(
    root: Path, source: ImageSource, layout: Path, tag: str, digest: str, env: dict[str, str], tools: _Tools
) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=root))
    try:
        bundle = scratch / "bundle"
        # umoci's rootless mode looks at how /etc/resolv.conf is mounted; nothing reads it.
        resolv = (Path("/etc/resolv.conf"),) if Path("/etc/resolv.conf").exists() else ()
        try:
            result = run_confined(
                ["/bin/sh", "-c", _UNPACK_SCRIPT, "unpack", tools.umoci, f"{layout}:{tag}", str(bundle)],
                cwd=scratch,
                confinement=Confinement(writable=(scratch,), read_only=(layout, *resolv, *tools.visible_folders())),
                environment={"PATH": SYSTEM_PATH},
                timeout=settings.IMAGE_PULL_TIMEOUT_SECONDS,
            )
        except subprocess.TimeoutExpired:
            reason = f"it took more than {settings.IMAGE_PULL_TIMEOUT_SECONDS} s"
            raise ImageUnavailable(UNPACK_FAILED.format(reference=source.reference, reason=reason)) from None
        if result.returncode != 0:
            reason = _reason(result.stderr, hide=root)
            raise ImageUnavailable(UNPACK_FAILED.format(reference=source.reference, reason=reason))
        rootfs = bundle / "rootfs"
        for folder in (bundle, rootfs):
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                raise ImageUnavailable(UNPACK_FAILED.format(reference=source.reference, reason="no root filesystem"))
            # Searchable by the sandboxes' accounts (umoci made the bundle private; an
            # image may ask for a private /): what is inside keeps the image's modes.
            folder.chmod(0o755)
        _write_json(bundle / IMAGE_RECORD, {"reference": source.reference, "digest": digest, "env": env})
        os.rename(bundle, root / digest.removeprefix("sha256:"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _write_json(path: Path, content: dict[str, object]) -> None:
    """Written whole, then renamed into place: a reader sees the old file or the new one
    (and two writers at once each their own temporary file)."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(content, handle)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


def _shown_path(source: ImageSource, layout: Path) -> str:
    return source.reference.removeprefix("oci:").rpartition(":")[0] if source.layout else str(layout)


def _reason(stderr: bytes, *, hide: Path | None) -> str:
    """The tool's own reason, in one line: logrus's ``msg="…"`` (skopeo) or the last
    line (umoci), without the server's folders."""
    text = stderr.decode("utf-8", errors="replace")
    messages = _LOG_MESSAGE.findall(text)
    if messages:
        reason = re.sub(r"\\(.)", r"\1", messages[-1])
    else:
        lines = [line.strip(" ⨯\t") for line in text.splitlines() if line.strip()]
        reason = lines[-1] if lines else "no reason given"
    if hide is not None:
        reason = reason.replace(str(hide), "…")
    return reason[:500]
