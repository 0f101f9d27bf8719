"""A read-only view of the run's repository inside the test sandbox (core/sandbox.py).

Tools such as setuptools-scm, and tests that call ``git log``/``describe``/``status``/
``diff``, need a repository. The worktree's ``.git`` pointer names the repository's
place on the server, which the sandbox neither shows nor may name. Instead the sandbox
gets, all read-only:

- the repository's common git dir at ``/.git-repository``, with a minimal ``config``
  bound over its own (format version and ``[extensions]`` only: no remotes, no filters,
  no paths), an empty folder over ``worktrees/`` (other worktrees' records name server
  paths) and over ``logs/`` and ``modules/`` (reflogs say where a clone came from;
  submodules' configs name their URLs and places), and an empty ``alternates`` over one
  that names other object stores (paths of the server's);
- a small worktree git dir of its own at ``/.git-worktree``, made per command in the
  sandbox's support folder: the worktree's ``HEAD`` copied, ``commondir`` naming
  ``/.git-repository``, and the worktree's ``index`` bound over a placeholder;
- the ``.git`` pointer in ``/workspace`` saying ``gitdir: /.git-worktree``.

Nothing is writable: a ``git commit`` or any write into the git dir fails, and the
repository is unchanged. The worktree's git dir is found from its ``.git`` pointer file,
which is ours (restored after each command: ``workspace_reclaim``), and is used only when
it lies in a repository under ``REPOS_ROOT``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from django.conf import settings

logger = logging.getLogger(__name__)

REPOSITORY_INSIDE = "/.git-repository"
WORKTREE_INSIDE = "/.git-worktree"
VIEW_FOLDER = "git-view"
VIEW_POINTER = f"gitdir: {WORKTREE_INSIDE}\n"
SANDBOX_ROOT_INSIDE = "/workspace"  # core.sandbox_bwrap.SANDBOX_ROOT (which imports this module)
# What of the repository's own config the view keeps: its [extensions] (the object
# format, worktree config…), each a plain word, nothing that could name a program or path.
_SECTION = re.compile(r"^\s*\[\s*([A-Za-z0-9.-]+)\s*(?:\"[^\"]*\")?\s*\]\s*$")
_EXTENSION = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*=\s*([A-Za-z0-9_-]{1,40})\s*$")
_HEAD = re.compile(r"^(ref: refs/[A-Za-z0-9._/-]{1,240}|[0-9a-f]{40}|[0-9a-f]{64})\n?$")
# Folders of the repository hidden behind an empty one (they name server paths or URLs).
HIDDEN_FOLDERS = ("worktrees", "logs", "modules")
# Files of the repository hidden behind an empty one: remote URLs, the clone's source.
HIDDEN_FILES = ("FETCH_HEAD", "description", "objects/info/alternates", "objects/info/http-alternates")


def _worktree_git_dir(workspace: Path) -> tuple[Path, Path] | None:
    """The worktree's own git dir and its repository's common dir, from the worktree's
    ``.git`` pointer; None when it is not a linked worktree of a repository under
    REPOS_ROOT (the sandbox then sees only the neutral pointer)."""
    pointer = workspace / ".git"
    try:
        if pointer.is_symlink() or not pointer.is_file():
            return None
        text = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.startswith("gitdir: "):
        return None
    git_dir = Path(text.removeprefix("gitdir: ").strip())
    if not git_dir.is_absolute():
        git_dir = workspace / git_dir
    git_dir = Path(os.path.realpath(git_dir))
    try:
        common = Path(os.path.realpath(git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()))
    except (OSError, UnicodeDecodeError):
        return None
    root = Path(os.path.realpath(settings.REPOS_ROOT))
    if root not in common.parents or git_dir.parent != common / "worktrees" or not (common / "objects").is_dir():
        return None
    return git_dir, common


def _minimal_config(common: Path) -> str:
    """``[core]`` as a plain non-bare repository, and the repository's ``[extensions]``."""
    extensions: list[str] = []
    config_file = common / "config"
    try:
        # Never through a link: the server reads this file, the repository's owner wrote it.
        lines = (
            [] if config_file.is_symlink() else config_file.read_text(encoding="utf-8", errors="replace").splitlines()
        )
    except OSError:
        lines = []
    section = ""
    for line in lines[:2000]:
        header = _SECTION.match(line)
        if header:
            section = header.group(1).lower()
            continue
        entry = _EXTENSION.match(line) if section == "extensions" else None
        if entry:
            extensions.append(f"\t{entry.group(1)} = {entry.group(2)}\n")
    version = 1 if extensions else 0
    config = f"[core]\n\trepositoryformatversion = {version}\n\tbare = false\n"
    return config + ("[extensions]\n" + "".join(extensions) if extensions else "")


MAX_SUBMODULE_VIEWS = 50
MODULES_INSIDE = f"{WORKTREE_INSIDE}/modules"
_WORKTREE_SETTING = re.compile(r"^\s*worktree\s*=\s*(.+?)\s*$")


def _module_worktree(module: Path) -> str:
    """A submodule git dir's ``core.worktree`` (relative to it, as git writes it)."""
    config = module / "config"
    if config.is_symlink() or not config.is_file():
        return ""
    section = ""
    for line in config.read_text(encoding="utf-8", errors="replace").splitlines()[:2000]:
        header = _SECTION.match(line)
        if header:
            section = header.group(1).lower()
            continue
        found = _WORKTREE_SETTING.match(line) if section == "core" else None
        if found:
            return found.group(1).strip('"')
    return ""


def _submodule_views(git_dir: Path, workspace: Path) -> list[dict[str, str]]:
    """The worktree's checked-out submodules: each one's git dir (relative to the
    worktree git dir's ``modules/``, nested ones included) and its folder in the
    worktree. Only those whose folder lies inside the worktree and holds a ``.git``
    pointer file."""
    modules = git_dir / "modules"
    if modules.is_symlink() or not modules.is_dir():
        return []
    root = Path(os.path.realpath(workspace))
    views: list[dict[str, str]] = []
    for folder, dirnames, _ in os.walk(modules, followlinks=False):
        current = Path(folder)
        if (current / "HEAD").is_file() and (current / "objects").is_dir():
            dirnames[:] = [name for name in dirnames if name == "modules"]
            setting = _module_worktree(current)
            place = Path(os.path.realpath(current / setting)) if setting else None
            if place is not None and root in place.parents:
                pointer = place / ".git"
                if pointer.is_file() and not pointer.is_symlink():
                    name = str(current.relative_to(modules))
                    views.append({"name": name, "path": str(place.relative_to(root))})
        if len(views) >= MAX_SUBMODULE_VIEWS:
            break
    return views


def git_view_prepare(workspace: Path, support: Path) -> bool:
    """Make the view's own files in the command's support folder; whether there is a
    view (False: the sandbox keeps the neutral pointer). A view that cannot be made is
    no reason to refuse the command: it runs with the neutral pointer."""
    try:
        return _prepare(workspace, support)
    except (OSError, ValueError) as exc:
        logger.warning("No git view for %s: %s", workspace, exc)
        shutil.rmtree(support / VIEW_FOLDER, ignore_errors=True)
        return False


def _prepare(workspace: Path, support: Path) -> bool:
    found = _worktree_git_dir(workspace)
    if found is None:
        return False
    git_dir, common = found
    try:
        head = "" if (git_dir / "HEAD").is_symlink() else (git_dir / "HEAD").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    if not _HEAD.match(head):
        return False
    view = support / VIEW_FOLDER
    worktree = view / "worktree"
    worktree.mkdir(parents=True)
    (view / "empty").mkdir()
    (view / "empty-file").write_text("")
    (view / "config").write_text(_minimal_config(common))
    (view / "pointer").write_text(VIEW_POINTER)
    (worktree / "HEAD").write_text(head)
    (worktree / "commondir").write_text(f"{REPOSITORY_INSIDE}\n")
    (worktree / "gitdir").write_text("/workspace/.git\n")
    (worktree / "index").write_text("")  # the place the worktree's index is bound at
    folders = [view, worktree, view / "empty"]
    submodules = _submodule_views(git_dir, workspace)
    if submodules:
        # Each submodule's git dir shows through the worktree git dir's modules/, with
        # a config of ours (its worktree's place inside, no remote) and a pointer of
        # ours in its folder: theirs name the server's layout.
        (worktree / "modules").mkdir()
        folders.append(worktree / "modules")
        for number, submodule in enumerate(submodules):
            own = view / "modules" / str(number)
            own.mkdir(parents=True)
            folders += [own.parent, own]
            config = _minimal_config(git_dir / "modules" / submodule["name"])
            (own / "config").write_text(
                config.replace(
                    "\tbare = false\n", f"\tbare = false\n\tworktree = {SANDBOX_ROOT_INSIDE}/{submodule['path']}\n"
                )
            )
            (own / "pointer").write_text(f"gitdir: {MODULES_INSIDE}/{submodule['name']}\n")
            (own / "config").chmod(0o644)
            (own / "pointer").chmod(0o644)
        (view / "submodules.json").write_text(json.dumps(submodules))
    for path in folders:
        path.chmod(0o755)
    for path in (*view.iterdir(), *worktree.iterdir()):
        if path.is_file():
            path.chmod(0o644)
    return True


def git_view_arguments(workspace: Path, support: Path, workspace_inside: str) -> list[str] | None:
    """bwrap's binds for the view :func:`git_view_prepare` made (None: there is none).
    The pointer inside ``workspace_inside`` is bound last, over the worktree's own."""
    view = support / VIEW_FOLDER
    found = _worktree_git_dir(workspace) if view.is_dir() else None
    if found is None:
        return None
    git_dir, common = found
    args = [
        "--ro-bind",
        str(common),
        REPOSITORY_INSIDE,
        "--ro-bind",
        str(view / "config"),
        f"{REPOSITORY_INSIDE}/config",
    ]
    for name in HIDDEN_FOLDERS:
        hidden = common / name
        if hidden.is_dir() and not hidden.is_symlink():
            args += ["--ro-bind", str(view / "empty"), f"{REPOSITORY_INSIDE}/{name}"]
    for name in HIDDEN_FILES:
        hidden = common / name
        if hidden.is_file() and not hidden.is_symlink():
            if name.endswith("alternates"):
                # Objects kept elsewhere on the server are not shown (nor their place):
                # git says what it is missing.
                logger.warning("%s names other object stores; hidden from the sandbox", hidden)
            args += ["--ro-bind", str(view / "empty-file"), f"{REPOSITORY_INSIDE}/{name}"]
    args += ["--ro-bind", str(view / "worktree"), WORKTREE_INSIDE]
    index = git_dir / "index"
    if index.is_file() and not index.is_symlink():
        args += ["--ro-bind", str(index), f"{WORKTREE_INSIDE}/index"]
    args += ["--ro-bind", str(view / "pointer"), f"{workspace_inside}/.git"]
    listed = view / "submodules.json"
    submodules = json.loads(listed.read_text()) if listed.is_file() else []  # ours, written just before
    if submodules:
        args += ["--ro-bind", str(git_dir / "modules"), MODULES_INSIDE]
    for number, submodule in enumerate(submodules):
        own = view / "modules" / str(number)
        module, inside = git_dir / "modules" / submodule["name"], f"{MODULES_INSIDE}/{submodule['name']}"
        args += ["--ro-bind", str(own / "config"), f"{inside}/config"]
        for name in HIDDEN_FOLDERS:
            if (module / name).is_dir() and not (module / name).is_symlink() and name != "modules":
                args += ["--ro-bind", str(view / "empty"), f"{inside}/{name}"]
        for name in HIDDEN_FILES:
            if (module / name).is_file() and not (module / name).is_symlink():
                args += ["--ro-bind", str(view / "empty-file"), f"{inside}/{name}"]
        args += ["--ro-bind", str(own / "pointer"), f"{workspace_inside}/{submodule['path']}/.git"]
    return args
