"""Submodules and LFS (repos/submodules.py): a run's worktree gets its submodules at
their recorded commits from sources that pass the clone checks; what cannot be had
(a refused URL, LFS without git-lfs) is a warning on the repository, never a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from repos import submodules
from repos.models import Repository
from repos.services.linking import repository_link
from repos.services.worktrees import worktree_create
from repos.submodules import LFS_WITHOUT_GIT_LFS, submodule_url_resolve
from repos.tests.test_services import git, make_repo

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(tmp_path: Path, settings) -> Path:
    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    return tmp_path / "repos"


def commit(repo: Path, message: str) -> str:
    git(repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "--quiet", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def add_submodule(repo: Path, url: str, path: str) -> None:
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "--quiet", url, path)
    commit(repo, f"Add {path}")


@pytest.fixture
def library(root: Path) -> Path:
    return make_repo(root / "library", {"lib.py": "VERSION = 1\n"})


def test_a_worktree_gets_the_submodule_at_its_recorded_commit(project, root: Path, library: Path) -> None:
    app = make_repo(root / "app")
    add_submodule(app, str(library), "vendor/library")
    recorded = git(app, "rev-parse", "HEAD:vendor/library")
    # The library moves on after the app recorded it: the worktree keeps the recorded commit.
    (library / "lib.py").write_text("VERSION = 2\n")
    git(library, "add", "lib.py")
    commit(library, "Version 2")
    config_before = (app / ".git" / "config").read_text()
    linked = repository_link(project=project, path="app")
    assert linked.link_warnings == []

    worktree = root.parent / "worktrees" / "task-1-run-1"
    worktree.parent.mkdir(parents=True, exist_ok=True)
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)

    assert (worktree / "vendor" / "library" / "lib.py").read_text() == "VERSION = 1\n"
    assert git(worktree / "vendor" / "library", "rev-parse", "HEAD") == recorded
    assert git(worktree, "status", "--porcelain") == ""
    # The user's repository config is not written (the URL was given on the command line).
    assert (app / ".git" / "config").read_text() == config_before
    linked.refresh_from_db()
    assert linked.link_warnings == []


def test_a_relative_submodule_url_is_read_against_the_repository(project, root: Path, library: Path) -> None:
    app = make_repo(root / "app")
    add_submodule(app, "../library", "library")
    linked = repository_link(project=project, path="app")
    worktree = root.parent / "worktrees" / "task-1-run-1"
    worktree.parent.mkdir(parents=True, exist_ok=True)
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    assert (worktree / "library" / "lib.py").read_text() == "VERSION = 1\n"


@pytest.mark.parametrize("refused", ["http://127.0.0.1:1/x", "outside", "ext::sh -c touch% /tmp/pwned", "lib"])
def test_a_refused_submodule_url_leaves_it_empty_with_a_warning(
    project, root: Path, library: Path, tmp_path: Path, refused: str
) -> None:
    if refused == "outside":  # a repository outside REPOS_ROOT
        refused = str(make_repo(tmp_path / "elsewhere" / "secret-lib", {"secret.py": "KEY = 1\n"}))
    app = make_repo(root / "app")
    add_submodule(app, str(library), "vendor/library")
    git(app, "config", "--file", ".gitmodules", "submodule.vendor/library.url", refused)
    git(app, "add", ".gitmodules")
    commit(app, "Point the submodule elsewhere")

    linked = repository_link(project=project, path="app")
    assert len(linked.link_warnings) == 1
    assert "vendor/library is left empty" in linked.link_warnings[0] and "refused" in linked.link_warnings[0]

    worktree = root.parent / "worktrees" / "task-1-run-1"
    worktree.parent.mkdir(parents=True, exist_ok=True)
    base = worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    assert base == git(app, "rev-parse", "main")
    assert (worktree / "a.txt").read_text() == "one\ntwo\nthree\n"
    assert list((worktree / "vendor" / "library").iterdir()) == []
    assert not (root / "app" / ".git" / "worktrees" / "task-1-run-1" / "modules").exists()
    linked.refresh_from_db()
    assert len(linked.link_warnings) == 1  # the same warning, once


def test_relative_urls_resolve_like_git() -> None:
    assert submodule_url_resolve("../lib.git", "https://example.com/team/app.git") == "https://example.com/team/lib.git"
    assert submodule_url_resolve("./lib", "/srv/repos/app") == "/srv/repos/app/lib"
    assert submodule_url_resolve("../../x/lib", "/srv/repos/app") == "/srv/x/lib"
    assert submodule_url_resolve("../lib.git", "git@example.com:team/app.git") == "git@example.com:team/lib.git"
    assert submodule_url_resolve("https://h/x", "/srv/repos/app") == "https://h/x"


@pytest.fixture
def lfs_repo(root: Path) -> Path:
    return make_repo(root / "app", {"a.txt": "one\n", ".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs -text\n"})


def test_lfs_without_git_lfs_is_a_warning_on_the_page_and_in_the_api(
    project, lfs_repo: Path, client, owner, owner_client, monkeypatch
) -> None:
    monkeypatch.setattr(submodules, "git_lfs_installed", lambda: False)
    linked = repository_link(project=project, path="app")
    assert linked.link_warnings == [LFS_WITHOUT_GIT_LFS]

    client.force_login(owner)
    html = client.get(f"/projects/{project.pk}/repository").content.decode()
    assert 'data-testid="link-warnings"' in html and "install git-lfs on the server" in html
    body = owner_client.get(f"/api/projects/{project.pk}/repository").json()
    assert body["link_warnings"] == [LFS_WITHOUT_GIT_LFS]


def test_no_lfs_pull_is_attempted_without_git_lfs(project, lfs_repo: Path, monkeypatch) -> None:
    monkeypatch.setattr(submodules, "git_lfs_installed", lambda: False)
    commands: list[list[str]] = []
    real = submodules.run_git

    def recording(args: list[str], **kwargs):  # type: ignore[no-untyped-def]
        commands.append(args)
        return real(args, **kwargs)

    monkeypatch.setattr(submodules, "run_git", recording)
    linked = repository_link(project=project, path="app")
    worktree = lfs_repo.parent.parent / "worktrees" / "task-1-run-1"
    worktree.parent.mkdir(parents=True, exist_ok=True)
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    assert not any("lfs" in args for args in commands)
    assert (worktree / ".gitattributes").exists()


def test_a_repository_without_lfs_has_no_lfs_warning(project, root: Path) -> None:
    make_repo(root / "app", {"a.txt": "one\n", ".gitattributes": "*.txt text\n"})
    assert repository_link(project=project, path="app").link_warnings == []


def test_with_git_lfs_the_pull_is_attempted(project, lfs_repo: Path, monkeypatch) -> None:
    monkeypatch.setattr(submodules, "git_lfs_installed", lambda: True)
    commands: list[list[str]] = []
    real = submodules.run_git

    def recording(args: list[str], **kwargs):  # type: ignore[no-untyped-def]
        commands.append(args)
        if args[:2] == ["lfs", "pull"]:
            return real(["lfs-is-not-here"], **kwargs)  # git answers: no such command
        return real(args, **kwargs)

    monkeypatch.setattr(submodules, "run_git", recording)
    linked = repository_link(project=project, path="app")
    assert linked.link_warnings == []
    worktree = lfs_repo.parent.parent / "worktrees" / "task-1-run-1"
    worktree.parent.mkdir(parents=True, exist_ok=True)
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    assert ["lfs", "pull"] in commands
    assert Repository.objects.get(pk=linked.pk).link_warnings == [submodules.LFS_PULL_FAILED]


def test_git_in_the_test_sandbox_works_beside_a_submodule_and_names_no_server_path(
    project, root: Path, library: Path
) -> None:
    from core.sandbox_probe import sandbox_status
    from core.tests.test_sandbox_git import sandboxed

    app = make_repo(root / "app")
    add_submodule(app, str(library), "vendor/library")
    linked = repository_link(project=project, path="app")
    worktree = root.parent / "worktrees" / "task-1-run-1"
    worktree.parent.mkdir(parents=True, exist_ok=True)
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    sandbox_status(refresh=True)

    recorded = git(app, "rev-parse", "HEAD:vendor/library")
    pointer = (worktree / "vendor" / "library" / ".git").read_text()
    (worktree / "vendor" / "library" / "lib.py").write_text("VERSION = 3\n")
    _, output = sandboxed(
        worktree,
        "git status --porcelain; echo status=$?; cat vendor/library/.git; "
        "cd vendor/library && git log --format=%H -1 && git status --porcelain && git config --list --show-origin; "
        "git remote -v; git reflog -1; echo end",
    )
    assert "status=0" in output and " M vendor/library" in output, output
    assert recorded in output and " M lib.py" in output, output
    assert "gitdir: /.git-worktree/modules/vendor/library" in output, output
    assert str(root) not in output and "task-1-run-1" not in output and "library.git" not in output, output
    # The submodule's own pointer, and the library, are as they were.
    assert (worktree / "vendor" / "library" / ".git").read_text() == pointer
    assert git(worktree / "vendor" / "library", "rev-parse", "HEAD") == recorded


def test_a_submodule_name_that_could_end_a_config_key_is_not_fetched(
    project, root: Path, library: Path, tmp_path: Path
) -> None:
    app = make_repo(root / "app")
    add_submodule(app, str(library), "vendor/library")
    # A name with "=": "-c submodule.<name>.url=…" would set another key, and git would
    # read the unchecked URL from .gitmodules.
    outside = make_repo(tmp_path / "elsewhere" / "secret-lib", {"secret.py": "KEY = 1\n"})
    (app / ".gitmodules").write_text(f'[submodule "x=y"]\n\tpath = vendor/library\n\turl = {outside}\n')
    git(app, "add", ".gitmodules")
    commit(app, "Rename the submodule")
    linked = repository_link(project=project, path="app")
    worktree = root.parent / "worktrees" / "task-1-run-1"
    worktree.parent.mkdir(parents=True, exist_ok=True)
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)

    assert list((worktree / "vendor" / "library").iterdir()) == []
    linked.refresh_from_db()
    assert any("vendor/library is left empty" in warning for warning in linked.link_warnings)


def test_an_attempt_that_died_before_the_submodules_gets_them_when_redone(
    project, root: Path, library: Path, monkeypatch
) -> None:
    from repos.services import worktrees

    app = make_repo(root / "app")
    add_submodule(app, str(library), "vendor/library")
    linked = repository_link(project=project, path="app")
    worktree = root.parent / "worktrees" / "task-1-run-1"
    worktree.parent.mkdir(parents=True, exist_ok=True)
    real = worktrees._worktree_complete

    def dies(*args: object) -> None:
        raise SystemExit("the worker died")

    monkeypatch.setattr(worktrees, "_worktree_complete", dies)
    with pytest.raises(SystemExit):
        worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    assert list((worktree / "vendor" / "library").iterdir()) == []

    monkeypatch.setattr(worktrees, "_worktree_complete", real)
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    assert (worktree / "vendor" / "library" / "lib.py").read_text() == "VERSION = 1\n"


def test_a_finished_clone_says_what_the_server_cannot_provide(
    project, root: Path, lfs_repo: Path, tmp_path: Path, monkeypatch
) -> None:
    from repos.services.linking import repository_clone, repository_clone_execute

    monkeypatch.setattr(submodules, "git_lfs_installed", lambda: False)
    outside = make_repo(tmp_path / "elsewhere" / "lib")
    add_submodule(lfs_repo, str(outside), "lib")
    cloning = repository_clone(project=project, url=str(lfs_repo))
    assert cloning.link_warnings == []
    cloned = repository_clone_execute(repository_id=cloning.pk)

    assert cloned is not None and cloned.status == "ready"
    assert cloned.link_warnings[0] == LFS_WITHOUT_GIT_LFS
    assert len(cloned.link_warnings) == 2 and "The submodule lib is left empty" in cloned.link_warnings[1]
    assert str(outside) in cloned.link_warnings[1]  # the URL the repository names, said back to its owner
