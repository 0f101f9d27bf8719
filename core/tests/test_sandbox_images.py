"""A base image: its tree in place of the server's /usr, unpacked once, never trusted.

No registry is reachable here: images are OCI layouts built by the tests with umoci
(a tiny tree: dash as /bin/sh with its libraries, a marker file, a setuid program, the
image's own /etc/passwd). The pull is tested with skopeo copying from such a layout
through the same code a registry's ``docker://`` source goes through. skopeo, umoci
and bwrap must be installed (.ci/run installs them): without them these tests fail.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from core import sandbox_images
from core.exceptions import SandboxUnavailable
from core.sandbox import (
    IMAGE_NEEDS_SANDBOX,
    ProjectSandbox,
    limits_from_settings,
    nested_sandbox_argv,
    sandboxed_process,
)
from core.sandbox_image_references import (
    BAD_REFERENCE,
    LAYOUT_OUTSIDE,
    ImageReferenceInvalid,
    ImageSource,
    ImageUnavailable,
    parse_image_reference,
)
from core.sandbox_images import NO_SUCH_TAG, TOOLS_MISSING, image_root, pull_argv
from core.sandbox_probe import sandbox_status
from core.sandbox_rootfs import ImageRoot

SECRET = "s3cr3t-of-the-server-an-image-links-to"
IMAGE_ENV = ("PATH=/opt/imagebin:/bin", "PYTHON_VERSION=3.12.7", "BAD NAME=x")


def _run(*argv: object) -> None:
    subprocess.run([str(part) for part in argv], check=True, capture_output=True)


def _copy_with_libraries(program: str, rootfs: Path, target: str) -> None:
    """``program`` at ``target`` in ``rootfs`` with the shared libraries it loads, at
    the same paths (the image is not usr-merged: no /usr at all)."""
    destination = rootfs / target.lstrip("/")
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(program, destination)
    listing = subprocess.run(["ldd", program], check=True, capture_output=True, text=True).stdout
    for line in listing.splitlines():
        library = next((part for part in line.split() if part.startswith("/")), None)
        if library:
            copied = rootfs / library.lstrip("/")
            copied.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(library, copied)


def build_layout(layout: Path, scratch: Path, tag: str = "t", *, links_to: Path | None = None) -> Path:
    """An OCI layout at ``layout`` with one image tagged ``tag``, readable by the
    storage account (as an operator's layout must be); ``links_to``: a file of the
    server's that the image's links name (at the top and in /etc)."""
    bundle = scratch / "bundle"
    _run("umoci", "init", "--layout", layout)
    _run("umoci", "new", "--image", f"{layout}:{tag}")
    _run("umoci", "unpack", "--rootless", "--image", f"{layout}:{tag}", bundle)
    rootfs = bundle / "rootfs"
    _copy_with_libraries(os.path.realpath("/bin/sh"), rootfs, "/bin/sh")
    _copy_with_libraries(os.path.realpath("/bin/sh"), rootfs, "/opt/imagebin/imagetool")
    (rootfs / "opt" / "imagebin" / "imagetool").chmod(0o4755)  # setuid in the image
    (rootfs / "etc").mkdir()
    (rootfs / "etc" / "image-marker").write_text("from-the-image\n")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:image root:/root:/bin/sh\n")
    (rootfs / "etc" / "localtime").symlink_to("/usr/share/zoneinfo/UTC")
    if links_to is not None:
        (rootfs / "leak").symlink_to(links_to)
        (rootfs / "etc" / "leak").symlink_to(links_to)
    _run("umoci", "repack", "--image", f"{layout}:{tag}", bundle)
    _run("umoci", "config", "--image", f"{layout}:{tag}", *(f"--config.env={item}" for item in IMAGE_ENV))
    shutil.rmtree(bundle)
    _run("chmod", "-R", "a+rX", layout)
    return layout


@pytest.fixture
def images(tmp_path: Path, settings) -> Path:
    """IMAGES_ROOT and IMAGES_LOCAL_ROOT of the test's own, with an image at
    ``oci:base:t``; returns the local layouts' folder."""
    settings.IMAGES_ROOT = str(tmp_path / "images")
    settings.IMAGES_LOCAL_ROOT = str(tmp_path / "layouts")
    (tmp_path / "layouts").mkdir(mode=0o755)
    (tmp_path / "image-build").mkdir()
    secret = tmp_path / "server-secret.txt"
    secret.write_text(f"{SECRET}\n")
    secret.chmod(0o644)  # readable by anyone on the host: only the sandbox keeps it out
    build_layout(tmp_path / "layouts" / "base", tmp_path / "image-build", links_to=secret)
    sandbox_status(refresh=True)
    return tmp_path / "layouts"


@pytest.fixture
def worktree(tmp_path: Path, settings) -> Path:
    folder = Path(settings.WORKTREES_ROOT) / "task-1-run-1"
    folder.mkdir(parents=True)
    (folder / "app.py").write_text("print('hello')\n")
    return folder


def run_on(image: ImageRoot, worktree: Path, command: str, **project: object) -> str:
    with sandboxed_process(
        command=command,
        workspace=worktree,
        limits=limits_from_settings(),
        project=ProjectSandbox(image=image, **project),
    ) as process:
        assert process.stdout is not None
        output = process.stdout.read().decode()
        process.wait()
    return output


def test_a_command_runs_on_the_images_tree_not_the_servers(images: Path, worktree: Path) -> None:
    assert Path("/usr/bin/python3").exists()  # the server has one; the image has none
    image = image_root("oci:base:t")
    output = run_on(
        image,
        worktree,
        "read marker < /etc/image-marker; echo marker=$marker; "
        "test -e /usr/bin/python3 && echo host-python || echo no-host-python; "
        "echo path=$PATH; echo version=$PYTHON_VERSION; echo home=$HOME; "
        "imagetool -c 'echo found-on-the-images-path'; "
        "read first < /etc/passwd; echo passwd=$first; "
        "pwd; read line < /workspace/app.py; echo app=$line; echo made > /workspace/made.txt; "
        "echo x > /etc/image-marker 2>/dev/null || echo image-read-only; "
        "while read interface rest; do echo interface=$interface; done < /proc/net/dev; "
        "read leaked < /leak; echo top=$leaked; read leaked < /etc/leak; echo etc=$leaked",
    )
    lines = output.splitlines()
    # The image's links point inside the sandbox, never at the server's files.
    assert SECRET not in output and "top=" in lines and "etc=" in lines
    assert "marker=from-the-image" in lines
    assert "no-host-python" in lines
    assert "path=/workspace/.venv/bin:/workspace/node_modules/.bin:/opt/imagebin:/bin" in lines
    assert "version=3.12.7" in lines and "home=/home/sandbox" in lines
    assert "found-on-the-images-path" in lines
    # Our own /etc/passwd, not the image's.
    assert "passwd=sandbox:x:65534:65534:sandbox:/home/sandbox:/bin/sh" in lines
    assert "/workspace" in lines and "app=print('hello')" in lines
    assert (worktree / "made.txt").read_text() == "made\n"
    assert "image-read-only" in lines
    assert (image.rootfs / "etc" / "image-marker").read_text() == "from-the-image\n"
    # No network: the sandbox's own namespace holds only the loopback interface.
    interfaces = {line.removeprefix("interface=") for line in lines if line.startswith("interface=")}
    assert interfaces - {"Inter-|", "face"} == {"lo:"}
    with open("/proc/net/dev") as host:
        assert len(host.read().splitlines()) > 3  # the host has more: the test means something


def test_the_image_is_unpacked_once_without_setuid_bits_and_with_its_env(images: Path, monkeypatch) -> None:
    unpacks: list[str] = []
    real_unpack = sandbox_images._unpack

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        unpacks.append("unpack")
        return real_unpack(*args, **kwargs)

    monkeypatch.setattr(sandbox_images, "_unpack", counted)
    found: list[ImageRoot] = []
    errors: list[BaseException] = []

    def resolve() -> None:
        try:
            found.append(image_root("oci:base:t"))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=resolve) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(unpacks) == 1
    first = found[0]
    assert all(image == first for image in found)
    assert first.rootfs == Path(images.parent / "images" / first.digest.removeprefix("sha256:") / "rootfs")
    assert first.env == {"PATH": "/opt/imagebin:/bin", "PYTHON_VERSION": "3.12.7"}  # "BAD NAME" left out
    tool = first.rootfs / "opt" / "imagebin" / "imagetool"
    assert not tool.stat().st_mode & (stat.S_ISUID | stat.S_ISGID)
    assert tool.stat().st_mode & stat.S_IXUSR
    modified = first.rootfs.stat().st_mtime_ns
    assert image_root("oci:base:t") == first
    assert len(unpacks) == 1 and first.rootfs.stat().st_mtime_ns == modified
    # Nothing half-made is left beside it.
    assert not [path for path in (images.parent / "images").iterdir() if path.name.startswith(".unpacking-")]


def test_a_registry_image_is_pulled_once_through_skopeo_confined(images: Path, monkeypatch) -> None:
    """The pull's own code (skopeo copy as the storage account, the cache's layout, the
    record of the digest), with a local layout in the registry's place."""
    origins: list[str] = []

    def local_origin(source: ImageSource) -> tuple[str, tuple[Path, ...]]:
        origins.append(source.registry)
        return f"oci:{images / 'base'}:t", (images / "base",)

    monkeypatch.setattr(sandbox_images, "pull_origin", local_origin)
    found: list[ImageRoot] = []
    threads = [threading.Thread(target=lambda: found.append(image_root("python:3.12-slim"))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 3 and found[0] == found[1] == found[2]
    image = found[0]
    assert origins == ["docker.io/library/python:3.12-slim"]  # once, for three callers at once
    assert (image.rootfs / "etc" / "image-marker").read_text() == "from-the-image\n"
    assert image.env["PYTHON_VERSION"] == "3.12.7"
    # Known now: no second pull, no subprocess at all.
    monkeypatch.setattr(sandbox_images, "run_confined", None)
    assert image_root("docker.io/library/python:3.12-slim") == ImageRoot(
        reference="docker.io/library/python:3.12-slim", digest=image.digest, rootfs=image.rootfs, env=image.env
    )
    assert origins == ["docker.io/library/python:3.12-slim"]


def test_the_pull_command_for_a_registry() -> None:
    source = parse_image_reference("ghcr.io/owner/tool:1.2")
    origin, folders = sandbox_images.pull_origin(source)
    assert (origin, folders) == ("docker://ghcr.io/owner/tool:1.2", ())
    argv = pull_argv("/usr/bin/skopeo", origin, Path("/images/pulled/k/layout"), Path("/images/pulled/k/tmp"))
    assert argv == [
        "/usr/bin/skopeo",
        "--insecure-policy",
        "--tmpdir",
        "/images/pulled/k/tmp",
        "copy",
        "--retry-times",
        "2",
        "docker://ghcr.io/owner/tool:1.2",
        "oci:/images/pulled/k/layout:image",
    ]
    assert source.registry_host == ("ghcr.io", 443)
    assert parse_image_reference("python").registry_host == ("registry-1.docker.io", 443)


@pytest.mark.parametrize(
    ("reference", "qualified"),
    [
        ("python:3.12-slim", "docker.io/library/python:3.12-slim"),
        ("docker://python", "docker.io/library/python:latest"),
        ("library/python:3", "docker.io/library/python:3"),
        ("ghcr.io/x/y:tag", "ghcr.io/x/y:tag"),
        ("localhost:5000/team/app", "localhost:5000/team/app:latest"),
        ("python:3.12@sha256:" + "a" * 64, "docker.io/library/python@sha256:" + "a" * 64),
    ],
)
def test_registry_references_are_qualified(reference: str, qualified: str) -> None:
    assert parse_image_reference(reference).registry == qualified


@pytest.mark.parametrize(
    "reference",
    ["", "Python:3", "python:", "python:3 slim", "python@sha256:abc", "-x/y", "a//b", "python:3;rm -rf /", "oci:"],
)
def test_malformed_references_are_refused(reference: str) -> None:
    with pytest.raises(ImageReferenceInvalid) as raised:
        parse_image_reference(reference)
    assert raised.value.message == BAD_REFERENCE


def test_a_layout_outside_the_allowed_folders_is_refused(images: Path, tmp_path: Path, settings) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (images / "escape").symlink_to(outside)
    for reference in (f"oci:{outside}:t", "oci:../elsewhere:t", "oci:escape:t", "oci:/etc:t"):
        with pytest.raises(ImageReferenceInvalid) as raised:
            parse_image_reference(reference)
        assert raised.value.message == LAYOUT_OUTSIDE, reference
    inside_repos = Path(settings.REPOS_ROOT) / "mine" / "layout"
    inside_repos.mkdir(parents=True)
    assert parse_image_reference(f"oci:{inside_repos}:t").layout == inside_repos.resolve()
    assert parse_image_reference("oci:base:t").layout == (images / "base").resolve()


def test_a_missing_tag_or_tool_says_so(images: Path, monkeypatch) -> None:
    with pytest.raises(ImageUnavailable) as raised:
        image_root("oci:base:nope")
    assert raised.value.message == NO_SUCH_TAG.format(path="base", tag="nope")
    real_which = shutil.which
    monkeypatch.setattr(sandbox_images.shutil, "which", lambda name: None if name == "umoci" else real_which(name))
    with pytest.raises(ImageUnavailable) as raised:
        image_root("oci:base:t")
    assert raised.value.message == TOOLS_MISSING.format(missing="umoci")


def test_a_broken_layout_gives_the_tools_reason(images: Path) -> None:
    broken = images / "broken"
    broken.mkdir()
    (broken / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (broken / "index.json").write_text("not json")
    for path in (broken, broken / "oci-layout", broken / "index.json"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    with pytest.raises(ImageUnavailable) as raised:
        image_root("oci:broken:t")
    assert raised.value.message.startswith("The image oci:broken:t could not be read: ")
    assert "invalid character" in raised.value.message  # skopeo's own words about index.json


def test_without_the_sandbox_an_image_is_refused(images: Path, worktree: Path, settings) -> None:
    image = image_root("oci:base:t")
    settings.UNSAFE_RUN_TESTS_WITHOUT_SANDBOX = True
    with pytest.raises(SandboxUnavailable) as raised:
        run_on(image, worktree, "echo ran > ran.txt")
    assert raised.value.message == IMAGE_NEEDS_SANDBOX.format(reference="oci:base:t")
    assert not (worktree / "ran.txt").exists()
    with pytest.raises(ImageUnavailable):
        image_root("oci:base:t")


def test_the_nested_sandbox_runs_on_the_image(images: Path, worktree: Path) -> None:
    """The Claude CLI's test runner: bwrap inside a sandbox that shows the image's tree
    read-only at its own path (llm/providers/claude_cli_sandbox.py binds it)."""
    from core.sandbox import sandboxed_program

    image = image_root("oci:base:t")
    inner = nested_sandbox_argv(
        ["/bin/sh", "-c", "read marker < /etc/image-marker; echo $marker $PYTHON_VERSION; test -e /usr || echo no-usr"],
        tmp_size_mb=16,
        image=image,
    )
    with sandboxed_program(
        argv=inner,
        workspace=worktree,
        limits=limits_from_settings(),
        environment={"PATH": "/usr/bin:/bin"},
        read_only=(image.rootfs,),
        stderr=subprocess.STDOUT,
    ) as process:
        assert process.stdout is not None
        output = process.stdout.read().decode()
        process.wait()
    assert output.splitlines() == ["from-the-image 3.12.7", "no-usr"], output
