"""Repository folders belong to their owner; clone URLs do not reach the server's network.

Alice (owner) links or clones a repository; Bob (other_user) tries to use it every way
there is. Each refusal must read exactly like the answer for a folder that is not
there, and no answer may carry a server path.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from repos import folders
from repos.clone import (
    CLONE_FAILED,
    HOST_NOT_ALLOWED,
    HOST_UNREACHABLE,
    REPOSITORY_REFUSED,
    clone_from,
    clone_host_check,
)
from repos.git import GitError
from repos.models import Repository, RepositoryFolder, RepositoryStatus
from repos.services.branches import branch_changed_files, branch_diff, branch_format_patch, branch_merge
from repos.services.commits import worktree_commit
from repos.services.linking import repository_clone, repository_clone_execute, repository_link
from repos.services.worktrees import worktree_create
from repos.tests.test_services import make_repo

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(tmp_path: Path, settings) -> Path:
    settings.REPOS_ROOT = str(tmp_path / "repos")
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    (tmp_path / "repos").mkdir()
    return tmp_path / "repos"


@pytest.fixture
def alices(project, root: Path) -> Repository:
    make_repo(root / "1-demo-app")
    make_repo(root / "1-demo-app" / "vendored")  # a repository inside Alice's
    return repository_link(project=project, path="1-demo-app")


def url(project) -> str:
    return f"/api/projects/{project.pk}/repository"


def test_another_users_folder_answers_exactly_like_a_missing_one(
    alices, other_project, other_client, root: Path, tmp_path: Path
) -> None:
    (root / "around").mkdir()
    make_repo(tmp_path / "outside")
    (root / "link-to-alices").symlink_to(root / "1-demo-app")
    missing = other_client.put(url(other_project), {"path": "no-such-folder"}, format="json")
    assert missing.status_code == 400
    for path in ("1-demo-app", str(root / "1-demo-app"), "1-demo-app/vendored", "link-to-alices", "."):
        refused = other_client.put(url(other_project), {"path": path}, format="json")
        assert (refused.status_code, refused.json()) == (400, missing.json()), path
    for body in (missing.json(), refused.json()):
        assert str(tmp_path) not in str(body) and "/repos" not in str(body)
    assert not Repository.objects.filter(project=other_project).exists()


def test_cloning_from_another_users_folder_is_refused_like_a_missing_one(
    alices, other_project, other_client, root: Path
) -> None:
    missing = other_client.post(url(other_project) + "/clone", {"url": str(root / "nothing")}, format="json")
    refused = other_client.post(url(other_project) + "/clone", {"url": str(root / "1-demo-app")}, format="json")
    assert missing.status_code == 400 and (refused.status_code, refused.json()) == (400, missing.json())
    assert not Repository.objects.filter(project=other_project).exists()


def test_the_owner_may_link_their_folder_from_another_project(alices, owner, root: Path) -> None:
    from tests.factories import ProjectFactory

    second = ProjectFactory(owner=owner)
    repository = repository_link(project=second, path="1-demo-app")
    assert repository.status == RepositoryStatus.READY
    folder = RepositoryFolder.objects.get()
    assert folder.owner == owner and folder.project == alices.project


def test_an_operator_can_share_or_grant_a_folder(alices, other_user, other_project, owner, project, root) -> None:
    folder = RepositoryFolder.objects.get(path=alices.path)
    folder.shared_with.add(other_user)
    assert repository_link(project=other_project, path="1-demo-app").status == RepositoryStatus.READY
    # A server folder granted to Bob is Bob's: Alice cannot take it by linking it first.
    make_repo(root / "team-tool")
    granted = RepositoryFolder(path="team-tool", owner=other_user)
    granted.full_clean()
    granted.save()
    assert granted.path == str((root / "team-tool").resolve())
    with pytest.raises(ValidationError) as refused:
        repository_link(project=project, path="team-tool")
    assert refused.value.message_dict["path"] == [folders.FOLDER_UNAVAILABLE]


def test_clones_go_to_the_users_own_area_under_names_nobody_can_guess(project, root: Path, owner) -> None:
    source = make_repo(root / "source")
    first = repository_clone(project=project, url=str(source))
    repository_clone_execute(repository_id=first.pk)
    first.refresh_from_db()
    assert first.status == RepositoryStatus.READY, first.error
    area = root / "users" / str(owner.pk)
    assert Path(first.path).parent == area.resolve()
    assert Path(first.path).name.startswith("source-") and len(Path(first.path).name) == len("source-") + 12
    assert RepositoryFolder.objects.filter(path=first.path, owner=owner).exists()


def test_another_users_clone_area_is_not_theirs_to_link(project, other_project, root: Path, owner) -> None:
    make_repo(root / "users" / str(owner.pk) / "unclaimed")
    with pytest.raises(ValidationError) as refused:
        repository_link(project=other_project, path=f"users/{owner.pk}/unclaimed")
    assert refused.value.message_dict["path"] == [folders.FOLDER_UNAVAILABLE]


def test_a_link_made_before_folders_had_owners_no_longer_reaches_the_folder(alices, other_project, tmp_path) -> None:
    # What the hole left behind: Bob's project linked to Alice's folder.
    stale = Repository.objects.create(project=other_project, path=alices.path, base_branch="main")
    with pytest.raises(GitError) as refused:
        worktree_create(repository=stale, branch="autocoder/task-9-run-1", path=tmp_path / "worktrees" / "x")
    assert refused.value.message == folders.FOLDER_TAKEN
    with pytest.raises(GitError):
        branch_merge(repository=stale, branch="main")
    assert not (tmp_path / "worktrees" / "x").exists()


# --- Clone URLs and the server's own network ----------------------------------------------


@pytest.mark.parametrize(
    "clone_url",
    [
        "git://127.0.0.1:8096/secret.git",
        "https://localhost/repo.git",
        "https://10.0.0.5/repo.git",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]:8443/repo.git",
        "https://[::ffff:127.0.0.1]/repo.git",
        "ssh://0.0.0.0/repo.git",
        "git@192.168.1.10:team/repo.git",
        "https://100.64.0.1/repo.git",
    ],
)
def test_internal_hosts_are_refused(project, owner_client, root: Path, clone_url: str) -> None:
    with pytest.raises(ValidationError) as refused:
        clone_host_check(clone_url)
    assert refused.value.message_dict["url"] == [HOST_NOT_ALLOWED]
    response = owner_client.post(url(project) + "/clone", {"url": clone_url}, format="json")
    assert response.status_code == 400 and response.json()["extra"]["fields"]["url"] == [HOST_NOT_ALLOWED]
    assert not Repository.objects.exists()


@pytest.mark.parametrize("clone_url", ["http://example.com/repo.git", "ftp://example.com/r", "file:///etc"])
def test_only_https_ssh_and_git_transports(project, root: Path, clone_url: str) -> None:
    with pytest.raises(ValidationError):
        repository_clone(project=project, url=clone_url)


def test_the_worker_checks_again_and_a_host_that_turned_internal_is_refused(project, root: Path, monkeypatch) -> None:
    # Public when asked, loopback when cloning: a DNS answer that changed (rebinding).
    answers = iter([[(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.215.14", 443))]])

    def getaddrinfo(host, port, *args, **kwargs):
        return next(answers, [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 443))])

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    repository = repository_clone(project=project, url="https://rebinding.example/repo.git")
    repository_clone_execute(repository_id=repository.pk)
    repository.refresh_from_db()
    assert repository.status == RepositoryStatus.FAILED and repository.error == HOST_NOT_ALLOWED


def test_a_failed_clone_does_not_echo_what_the_host_answered(tmp_path: Path, settings) -> None:
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    banner = b"SSH-2.0-internal-secret-banner\r\nredis_version:7.0.15 requirepass hunter2\r\n"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.sendall(banner)

    threading.Thread(target=answer, daemon=True).start()
    port = listener.getsockname()[1]
    try:
        with pytest.raises(GitError) as failed:
            clone_from(f"git://127.0.0.1:{port}/secret.git", tmp_path / "clone")
    finally:
        listener.close()
    assert "hunter2" not in failed.value.message and "banner" not in failed.value.message
    assert failed.value.message in (CLONE_FAILED, HOST_UNREACHABLE, REPOSITORY_REFUSED)


@pytest.mark.slow
def test_an_allowed_internal_network_clones_over_git(tmp_path: Path, settings) -> None:
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    served = tmp_path / "served"
    source = make_repo(served / "team.git")
    (source / ".git" / "git-daemon-export-ok").touch()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--listen=127.0.0.1", f"--port={port}", f"--base-path={served}", str(served)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(50):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                threading.Event().wait(0.1)
        clone_from(f"git://127.0.0.1:{port}/team.git", tmp_path / "clone")
    finally:
        daemon.terminate()
        daemon.wait()
    assert (tmp_path / "clone" / "a.txt").read_text() == "one\ntwo\nthree\n"
    origin = subprocess.run(
        ["git", "remote", "get-url", "origin"], cwd=tmp_path / "clone", capture_output=True, text=True, check=True
    )
    assert origin.stdout.strip() == f"git://127.0.0.1:{port}/team.git"


# --- Server-side git runs nothing a repository names ----------------------------------------


def test_server_side_git_runs_no_hook_and_no_program_the_repository_configures(
    project, root: Path, tmp_path: Path
) -> None:
    repo = make_repo(root / "booby-trapped")
    marker = tmp_path / "ran"
    command = f"touch {marker}-$(basename $0 2>/dev/null || echo x); true"
    hooks = repo / ".git" / "hooks"
    for hook in ("pre-commit", "post-commit", "post-checkout", "reference-transaction", "post-merge", "pre-auto-gc"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}-{hook}\n")
        (hooks / hook).chmod(0o755)
    other_hooks = tmp_path / "other-hooks"
    other_hooks.mkdir()
    (other_hooks / "post-commit").write_text(f"#!/bin/sh\ntouch {marker}-hookspath\n")
    (other_hooks / "post-commit").chmod(0o755)
    for key, value in (
        ("core.hooksPath", str(other_hooks)),
        ("core.fsmonitor", command),
        ("core.pager", command),
        ("core.editor", command),
        ("diff.external", command),
        ("credential.helper", f"!{command}"),
        ("core.sshCommand", command),
    ):
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    (repo / ".gitattributes").write_text("*.txt diff=trap\n")
    subprocess.run(["git", "config", "diff.trap.textconv", command], cwd=repo, check=True)

    linked = repository_link(project=project, path="booby-trapped")
    worktree = tmp_path / "worktrees" / "run-1"
    base = worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    (worktree / "a.txt").write_text("changed\n")  # the Coder's edit
    worktree_commit(repository=linked, worktree=worktree, message="Change\n")
    branch_changed_files(repository=linked, base=base, head="autocoder/task-1-run-1")
    assert "+changed" in branch_diff(repository=linked, base=base, head="autocoder/task-1-run-1")
    branch_format_patch(repository=linked, base="main", branch="autocoder/task-1-run-1")
    from repos.selectors import repository_state

    repository_state(repository=linked)
    assert branch_merge(repository=linked, branch="autocoder/task-1-run-1").merged
    assert sorted(path.name for path in tmp_path.glob("ran-*")) == []


def test_the_migration_gives_each_linked_folder_to_its_first_linker(project, other_project, root: Path) -> None:
    import importlib

    from django.apps import apps

    migration = importlib.import_module("repos.migrations.0002_repository_folders")
    path = str(make_repo(root / "shared-before").resolve())
    first = Repository.objects.create(project=project, path=path, base_branch="main")
    inside = Repository.objects.create(project=other_project, path=f"{path}/vendored", base_branch="main")
    migration.claim_linked_folders(apps, None)

    folder = RepositoryFolder.objects.get()
    assert (folder.path, folder.owner, folder.project) == (path, project.owner, project)
    first.refresh_from_db()
    inside.refresh_from_db()
    assert first.status == RepositoryStatus.READY
    assert inside.status == RepositoryStatus.FAILED and inside.error == migration.TAKEN
