"""No git command that reads a user's repository or worktree runs with the server's
rights (issue: "nothing a user's repository holds ever runs as the server").

Each test plants a program where a user's repository can name one — a nested
repository's filter in a submodule's folder, a push target's own config, a linked
folder's smudge filter — and gives it a host-only place to leave its mark and a secret
to read. On the server's own git (before) every one ran as root and left its mark; now
git runs in the sandbox as the storage account and sees only that repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from core.sandbox_accounts import storage_ids
from core.sandbox_probe import sandbox_status
from repos.clone import push_to
from repos.editor import editor_run
from repos.git import GitAccess, run_git
from repos.services.branches import branch_changed_files, branch_merge
from repos.services.commits import worktree_commit
from repos.services.forge import repository_set_forge
from repos.services.linking import repository_link
from repos.services.worktrees import worktree_create
from repos.tests.test_services import git, make_repo

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed; .ci/run installs it"),
]

SECRET = "s3cr3t-the-confined-git-must-not-read"


@pytest.fixture
def root(tmp_path: Path, settings) -> Path:
    (tmp_path / "repos").mkdir()
    sandbox_status(refresh=True)
    return tmp_path / "repos"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file of the server's, beside the repositories (not in any of them)."""
    path = tmp_path / "server-secret"
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


def trap(mark: Path, secret: Path) -> str:
    """A shell program that leaves ``mark`` on the host holding its uid and what it
    could read of ``secret`` and of the process that started it."""
    return f"id -u > {mark}; cat {secret} >> {mark} 2>&1; cat /proc/$PPID/environ >> {mark} 2>&1; true"


def assert_ran_nowhere_on_the_host(mark: Path) -> None:
    assert not mark.exists(), f"a repository's program ran outside the sandbox: {mark.read_text()[:200]!r}"


def test_a_nested_repository_in_a_submodule_folder_runs_its_filter_nowhere_on_the_host(
    project, root: Path, tmp_path: Path, secret: Path
) -> None:
    # A project with a submodule: a gitlink at sub/ (its folder empty in a worktree).
    repo = make_repo(root / "app")
    commit = git(repo, "rev-parse", "HEAD")
    (repo / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n\turl = https://example.com/sub.git\n')
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{commit},sub")
    git(repo, "add", ".gitmodules")
    git(repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qm", "Add a submodule")
    linked = repository_link(project=project, path="app")
    worktree = tmp_path / "worktrees" / "task-1-run-1"
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)

    # What the project's test command does in the sandbox: the empty submodule folder
    # becomes a repository of its own with a clean filter, one commit and a racy index.
    mark = tmp_path / "ran-as-server"
    nested = worktree / "sub"
    nested.mkdir(exist_ok=True)
    git(nested, "init", "-q")
    (nested / "file.txt").write_text("content\n")
    git(nested, "add", "-A")
    git(nested, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-qm", "nested")
    (nested / ".git" / "pwn.sh").write_text(trap(mark, secret) + "\ncat\n")
    git(nested, "config", "filter.x.clean", "sh .git/pwn.sh")
    (nested / ".gitattributes").write_text("* filter=x\n")
    (nested / "file.txt").write_text("changed\n")
    git(nested, "read-tree", "HEAD")
    for path in nested.rglob("*"):
        os.utime(path, (1, 1))  # racy: git must look at the content

    # The next coding round: the server lists and commits the worktree.
    (worktree / "a.txt").write_text("the Coder's edit\n")
    run_git(
        ["status", "--porcelain", "-z", "--untracked-files=all"],
        cwd=worktree,
        access=GitAccess(writable=(repo / ".git", worktree)),
    )
    worktree_commit(repository=linked, worktree=worktree, message="Change\n")
    assert_ran_nowhere_on_the_host(mark)


def test_a_push_target_inside_a_working_tree_is_refused(project, root: Path) -> None:
    # The layout a run's ordinary edits can leave in a working tree once merged.
    make_repo(root / "app")
    repository_link(project=project, path="app")
    cache = root / "app" / "vendor" / "cache.git"
    cache.mkdir(parents=True)
    subprocess.run(["git", "init", "--bare", "-q", str(cache)], check=True)
    repository = project.repository
    with pytest.raises(ValidationError) as refused:
        repository_set_forge(repository=repository, user=project.owner, push_url="app/vendor/cache.git")
    assert "push_url" in refused.value.message_dict
    # A bare repository of its own under the root (an operator's) is still a target.
    subprocess.run(["git", "init", "--bare", "-q", str(root / "team.git")], check=True)
    repository_set_forge(repository=repository, user=project.owner, push_url="team.git")
    assert project.repository.push_url == str((root / "team.git").resolve())


def test_a_hostile_push_target_runs_its_config_nowhere_on_the_host(
    project, root: Path, tmp_path: Path, secret: Path
) -> None:
    repo = make_repo(root / "app")
    git(repo, "branch", "autocoder/task-1-run-1")
    target = root / "remote.git"
    subprocess.run(["git", "init", "--bare", "-q", str(target)], check=True)
    mark = tmp_path / "ran-as-server"
    (target / "p.sh").write_text(trap(mark, secret) + "\n")
    git(target, "config", "core.alternateRefsCommand", f"sh {target}/p.sh")
    hook = target / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\n{trap(mark, secret)}\n")
    hook.chmod(0o755)
    # The server's own repository borrows from it, as a layout a run wrote could say.
    (repo / ".git" / "objects" / "info" / "alternates").write_text(f"{target}/objects\n")

    push_to(repo, str(target), "autocoder/task-1-run-1")
    assert_ran_nowhere_on_the_host(mark)
    assert git(target, "rev-parse", "autocoder/task-1-run-1") == git(repo, "rev-parse", "main")


def test_a_linked_folders_own_smudge_filter_runs_nowhere_on_the_host(
    project, root: Path, tmp_path: Path, secret: Path
) -> None:
    repo = make_repo(root / "app", {"a.txt": "one\n", ".gitattributes": "*.txt filter=x\n"})
    mark = tmp_path / "ran-as-server"
    git(repo, "config", "filter.x.smudge", trap(mark, secret).replace("; true", "; cat"))
    git(repo, "config", "filter.x.clean", trap(mark, secret).replace("; true", "; cat"))
    linked = repository_link(project=project, path="app")
    worktree = tmp_path / "worktrees" / "task-1-run-1"
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    (worktree / "a.txt").write_text("two\n")
    worktree_commit(repository=linked, worktree=worktree, message="Change\n")
    assert branch_merge(repository=linked, branch="autocoder/task-1-run-1").merged
    assert_ran_nowhere_on_the_host(mark)


def test_git_runs_as_the_storage_account_and_sees_only_its_repository(project, root: Path, tmp_path: Path) -> None:
    repo = make_repo(root / "app")
    other = make_repo(root / "someone-elses")
    seen = tmp_path / "seen"
    # A filter that is allowed to leave its findings inside the repository it runs in.
    report = repo / ".git" / "report"
    git(repo, "config", "core.fsmonitor", "")  # ours overrides it anyway
    git(repo, "config", "filter.x.clean", f"sh -c 'id -u > {report}; ls {other} >> {report} 2>&1; cat'")
    (repo / ".gitattributes").write_text("* filter=x\n")
    (repo / "b.txt").write_text("new\n")
    run_git(["add", "b.txt"], cwd=repo)
    findings = report.read_text().splitlines()
    ids = storage_ids()
    assert findings[0] == "65534"  # the sandbox's inside uid, never 0
    assert "No such file or directory" in findings[1]  # another repository is not there
    if ids is not None:  # the server is root: files git wrote are the storage account's
        assert (repo / ".git" / "index").stat().st_uid == ids[0]
    assert not seen.exists()


def test_a_hard_link_to_the_worktree_pointer_is_broken_before_anything_writes_through_it(
    tmp_path: Path, settings
) -> None:
    import dataclasses

    from core.sandbox import limits_from_settings
    from repos.verify import run_test_command

    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    worktree = tmp_path / "worktrees" / "task-1-run-1"
    worktree.mkdir(parents=True)
    pointer = f"gitdir: {tmp_path}/repos/app/.git/worktrees/task-1-run-1\n"
    (worktree / ".git").write_text(pointer)
    sandbox_status(refresh=True)
    # Inside the sandbox the pointer is a read-only stand-in that cannot be linked
    # (EXDEV); a link made outside it, as the operator's opt-out would allow, must not
    # survive the next command either.
    os.link(worktree / ".git", worktree / "notes.txt")
    result = run_test_command(
        command="ln .git other.txt 2>&1; echo linked",
        cwd=worktree,
        timeout=30,
        limits=dataclasses.replace(limits_from_settings()),
        max_output_chars=10_000,
        on_output=lambda text: None,
        should_cancel=lambda: False,
    )
    assert "linked" in result.output
    assert os.lstat(worktree / ".git").st_nlink == 1
    # The Coder then edits the file the command linked.
    outcome = editor_run(
        worktree=worktree,
        name="str_replace_based_edit_tool",
        tool_input={"command": "str_replace", "path": "notes.txt", "old_str": "gitdir: ", "new_str": "gitdir: /x"},
    )
    assert not outcome.is_error
    assert (worktree / ".git").read_text() == pointer


def test_a_run_that_moved_a_submodule_shows_its_commits(project, root: Path, tmp_path: Path) -> None:
    repo = make_repo(root / "app")
    first = git(repo, "rev-parse", "HEAD")
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{first},sub")
    git(repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qm", "Add a submodule")
    linked = repository_link(project=project, path="app")
    worktree = tmp_path / "worktrees" / "task-1-run-1"
    base = worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=worktree)
    moved = "1" * 40
    git(worktree, "update-index", "--cacheinfo", f"160000,{moved},sub")
    git(worktree, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qm", "Move the submodule")

    files = branch_changed_files(repository=linked, base=base, head="autocoder/task-1-run-1")
    assert files == [
        {
            "file_path": "sub",
            "action": "modify",
            "content": f"Subproject commit {moved}\n",
            "old_content": f"Subproject commit {first}\n",
            "new_content": f"Subproject commit {moved}\n",
            "submodule": True,
        }
    ]


def test_git_over_ssh_gets_the_operators_key_for_one_command_and_the_known_hosts(
    root: Path, tmp_path: Path, settings
) -> None:
    from repos.clone import _ssh_identity

    key = tmp_path / "deploy-key"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real one\n")
    key.chmod(0o600)
    settings.GIT_SSH_KEY_FILE = str(key)
    base = GitAccess(read_only=(root,), share_network=True)
    with _ssh_identity({"GIT_SSH_COMMAND": "ssh -o BatchMode=yes"}, base) as (environment, access):
        command = environment["GIT_SSH_COMMAND"]
        copy = Path(command.split(" -i ", 1)[1].split()[0])
        assert copy != key and copy.read_text() == key.read_text()
        ids = storage_ids()
        if ids is not None:  # readable by the account git runs as, by no one else
            assert (copy.stat().st_uid, oct(copy.stat().st_mode & 0o777)) == (ids[0], "0o600")
        known = root / ".ssh_known_hosts"
        assert f"-o UserKnownHostsFile={known}" in command and "IdentitiesOnly=yes" in command
        assert copy.parent in access.read_only and known in access.writable and access.share_network
    assert not copy.exists()  # gone with the command
    with _ssh_identity({}, base) as (environment, access):  # https: nothing added
        assert environment == {} and access == base


def test_a_gc_confined_to_one_worktree_keeps_the_others(project, root: Path, tmp_path: Path) -> None:
    from repos.git import worktree_access

    repo = make_repo(root / "app")
    linked = repository_link(project=project, path="app")
    first, second = tmp_path / "worktrees" / "task-1-run-1", tmp_path / "worktrees" / "task-2-run-1"
    worktree_create(repository=linked, branch="autocoder/task-1-run-1", path=first)
    worktree_create(repository=linked, branch="autocoder/task-2-run-1", path=second)
    # What an automatic gc after a commit in the first would do; the second is not
    # visible in its sandbox, and its record is old enough for git's own default expiry.
    for name in ("gitdir", "index"):
        os.utime(repo / ".git" / "worktrees" / "task-2-run-1" / name, (1, 1))
    run_git(["gc", "--quiet", "--prune=now"], cwd=first, access=worktree_access(repo, first))
    listed = git(repo, "worktree", "list", "--porcelain")
    assert f"worktree {second}" in listed and "prunable" not in listed
    (second / "b.txt").write_text("still works\n")
    assert worktree_commit(repository=linked, worktree=second, message="Change\n", written={"b.txt"})
