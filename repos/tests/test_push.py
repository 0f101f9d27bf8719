"""Pushing a run's branch to the repository's remote: a real bare repository over
file paths, and the network path's checks; never forced, failures that say what to do."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from repos.clone import PUSH_HOST_NOT_ALLOWED, PushError
from repos.models import Repository, RepositoryFolder
from repos.services.forge import NO_PUSH_TARGET, PUSH_TARGET_UNAVAILABLE, branch_push
from repos.tests.test_services import git, make_repo

pytestmark = pytest.mark.django_db

BRANCH = "autocoder/task-1-run-1"


@pytest.fixture
def setup(tmp_path: Path, settings, project):  # type: ignore[no-untyped-def]
    settings.REPOS_ROOT = str(tmp_path / "repos")
    work = make_repo(tmp_path / "repos" / "app")
    bare = (tmp_path / "repos" / "remote.git").resolve()
    git(tmp_path, "clone", "--quiet", "--bare", str(work), str(bare))
    RepositoryFolder.objects.create(path=str(bare), owner=project.owner)
    git(work, "checkout", "--quiet", "-b", BRANCH)
    (work / "a.txt").write_text("changed\n")
    git(work, "commit", "--quiet", "-am", "Run 1")
    repository = Repository.objects.create(
        project=project, path=str(work.resolve()), base_branch="main", push_url=str(bare)
    )
    return repository, work, bare


def test_push_creates_and_fast_forwards_the_remote_branch(setup, project) -> None:  # type: ignore[no-untyped-def]
    repository, work, bare = setup
    assert branch_push(repository=repository, user=project.owner, branch=BRANCH) == str(bare)
    assert git(bare, "rev-parse", BRANCH) == git(work, "rev-parse", BRANCH)
    (work / "a.txt").write_text("changed again\n")
    git(work, "commit", "--quiet", "-am", "Fix round")
    branch_push(repository=repository, user=project.owner, branch=BRANCH)
    assert git(bare, "rev-parse", BRANCH) == git(work, "rev-parse", BRANCH)


def test_a_remote_that_moved_is_never_overwritten(setup, project, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repository, work, bare = setup
    branch_push(repository=repository, user=project.owner, branch=BRANCH)
    other = tmp_path / "other"
    git(tmp_path, "clone", "--quiet", "--branch", BRANCH, str(bare), str(other))
    (other / "b.txt").write_text("someone else\n")
    git(other, "add", "b.txt")
    git(other, "commit", "--quiet", "-m", "Theirs")
    git(other, "push", "--quiet", "origin", BRANCH)
    theirs = git(bare, "rev-parse", BRANCH)
    (work / "a.txt").write_text("ours\n")
    git(work, "commit", "--quiet", "-am", "Ours")
    with pytest.raises(PushError) as error:
        branch_push(repository=repository, user=project.owner, branch=BRANCH)
    assert "has commits this one does not" in error.value.message and not error.value.retryable
    assert git(bare, "rev-parse", BRANCH) == theirs


def test_a_declining_hook_is_branch_protection(setup, project) -> None:  # type: ignore[no-untyped-def]
    repository, _, bare = setup
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'protected branch: no direct pushes' >&2\nexit 1\n")
    hook.chmod(0o755)
    with pytest.raises(PushError) as error:
        branch_push(repository=repository, user=project.owner, branch=BRANCH)
    assert "branch protection or a server hook declined" in error.value.message
    assert BRANCH not in git(bare, "branch", "--list")


def test_a_folder_no_longer_yours_or_no_remote_is_refused(setup, project, other_user) -> None:  # type: ignore[no-untyped-def]
    repository, _, bare = setup
    RepositoryFolder.objects.filter(path=str(bare)).update(owner=other_user)  # an operator gave it to someone else
    with pytest.raises(PushError) as error:
        branch_push(repository=repository, user=project.owner, branch=BRANCH)
    assert error.value.message == PUSH_TARGET_UNAVAILABLE
    repository.push_url = ""
    with pytest.raises(PushError) as none:
        branch_push(repository=repository, user=project.owner, branch=BRANCH)
    assert none.value.message == NO_PUSH_TARGET


def test_network_remotes_are_checked_and_unreachable_ones_are_worth_retrying(setup, project, settings) -> None:  # type: ignore[no-untyped-def]
    repository, _, _ = setup
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    repository.push_url = f"git://127.0.0.1:{port}/team/app.git"
    settings.CLONE_ALLOWED_NETWORKS = []
    with pytest.raises(PushError) as internal:
        branch_push(repository=repository, user=project.owner, branch=BRANCH)
    assert internal.value.message == PUSH_HOST_NOT_ALLOWED and "push URL" in internal.value.message
    settings.CLONE_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    with pytest.raises(PushError) as unreachable:
        branch_push(repository=repository, user=project.owner, branch=BRANCH)
    assert unreachable.value.retryable and "did not answer" in unreachable.value.message
