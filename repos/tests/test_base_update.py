"""A run's branch takes in a base that moved on: merged in cleanly, or committed with
conflict markers (diff3: the base's version too) and the hunks of both sides returned; a
rebase refused on a pushed branch; a remote's base fetched into a ref of ours; and the
repository's own merge drivers and hooks never run."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from repos.models import BaseUpdate, Repository, RepositoryFolder
from repos.services.base_update import (
    REBASE_REFUSED_PUSHED,
    REMOTE_BASE_REF,
    BaseUpdateRefused,
    base_head,
    branch_take_base,
    conflict_markers_left,
    resolution_diff,
)
from repos.services.branches import branch_merge
from repos.services.worktrees import worktree_create
from repos.tests.test_services import git

pytestmark = pytest.mark.django_db

BRANCH = "autocoder/task-1-run-1"
CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


def commit(root: Path, message: str, files: dict[str, str]) -> str:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    git(root, "add", "-A")
    git(root, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "--quiet", "-m", message)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def setup(tmp_path: Path, project):  # type: ignore[no-untyped-def]
    work = tmp_path / "repos" / "app"
    work.mkdir(parents=True)
    git(work, "init", "--quiet", "--initial-branch=main")
    commit(work, "Initial", {"calc.py": CALC, "README": "calc\n"})
    repository = Repository.objects.create(project=project, path=str(work.resolve()), base_branch="main")
    tree = tmp_path / "worktrees" / "run-1"
    tree.parent.mkdir(parents=True)
    worktree_create(repository=repository, branch=BRANCH, path=tree)
    (tree / "calc.py").write_text(CALC.replace("return a - b", "return a + b", 1))
    git(tree, "-c", "user.name=AutoCoder", "-c", "user.email=a@b", "commit", "--quiet", "-am", "Make add add")
    return repository, work, tree


def test_a_base_that_moved_elsewhere_is_merged_in_cleanly(setup) -> None:  # type: ignore[no-untyped-def]
    repository, work, tree = setup
    old_head = git(work, "rev-parse", BRANCH)
    moved = commit(work, "Document calc", {"README": "calc: add and sub\n"})
    assert base_head(repository=repository) == moved

    result = branch_take_base(
        repository=repository, branch=BRANCH, worktree=tree, base_commit=moved, pushed=False, message="Merge main\n"
    )
    assert (result.how, result.conflicts, result.base_subjects) == ("merge", [], ["Document calc"])
    assert git(work, "rev-parse", BRANCH) == result.head != old_head
    assert git(work, "rev-parse", f"{result.head}^1", f"{result.head}^2").split() == [old_head, moved]
    # The worktree holds the merge: the base's README and the run's change.
    assert (tree / "README").read_text() == "calc: add and sub\n"
    assert "return a + b" in (tree / "calc.py").read_text()
    again = branch_take_base(
        repository=repository, branch=BRANCH, worktree=tree, base_commit=moved, pushed=False, message="again"
    )
    assert (again.how, again.head) == ("up_to_date", result.head)


def test_a_conflict_is_committed_with_markers_and_both_hunks_returned(setup) -> None:  # type: ignore[no-untyped-def]
    repository, work, tree = setup
    moved = commit(work, "add returns an int", {"calc.py": CALC.replace("return a - b", "return int(a) - int(b)", 1)})

    result = branch_take_base(
        repository=repository, branch=BRANCH, worktree=tree, base_commit=moved, pushed=False, message="Merge main\n"
    )
    assert result.conflicted_paths == ["calc.py"]
    [hunk] = result.conflicts[0].hunks
    assert (hunk.ours.strip(), hunk.base.strip(), hunk.theirs.strip()) == (
        "return a + b",
        "return a - b",
        "return int(a) - int(b)",
    )
    assert result.base_subjects == ["add returns an int"]
    text = (tree / "calc.py").read_text()
    assert "<<<<<<<" in text and "|||||||" in text and ">>>>>>>" in text
    assert conflict_markers_left(repository=repository, commit=result.head, paths=["calc.py"]) == ["calc.py"]

    # Resolved by hand: no marker left, and the resolution is a diff of the conflicted file.
    (tree / "calc.py").write_text(CALC.replace("return a - b", "return int(a) + int(b)", 1))
    git(tree, "-c", "user.name=AutoCoder", "-c", "user.email=a@b", "commit", "--quiet", "-am", "Resolve")
    resolved = git(tree, "rev-parse", "HEAD")
    assert conflict_markers_left(repository=repository, commit=resolved, paths=["calc.py"]) == []
    diff = resolution_diff(repository=repository, merged=result.head, resolved=resolved, paths=["calc.py"])
    assert "+    return int(a) + int(b)" in diff and "-<<<<<<<" in diff


def test_a_rebase_is_refused_on_a_pushed_branch_and_done_on_one_never_pushed(setup) -> None:  # type: ignore[no-untyped-def]
    repository, work, tree = setup
    repository.base_update = BaseUpdate.REBASE
    repository.save()
    old_head = git(work, "rev-parse", BRANCH)
    moved = commit(work, "Document calc", {"README": "calc: add and sub\n"})
    with pytest.raises(BaseUpdateRefused) as refused:
        branch_take_base(
            repository=repository, branch=BRANCH, worktree=tree, base_commit=moved, pushed=True, message="x"
        )
    assert refused.value.message == REBASE_REFUSED_PUSHED.format(branch=BRANCH)
    assert git(work, "rev-parse", BRANCH) == old_head  # nothing rewritten

    result = branch_take_base(
        repository=repository, branch=BRANCH, worktree=tree, base_commit=moved, pushed=False, message="Rebased\n"
    )
    assert result.how == "rebase"
    # One parent, the base: a linear history.
    assert git(work, "rev-list", "--parents", "-n", "1", result.head).split() == [result.head, moved]
    assert "return a + b" in (tree / "calc.py").read_text()


def test_the_remotes_base_is_fetched_into_a_ref_of_ours(setup, tmp_path: Path, project) -> None:  # type: ignore[no-untyped-def]
    repository, work, _tree = setup
    bare = (tmp_path / "repos" / "remote.git").resolve()
    git(tmp_path, "clone", "--quiet", "--bare", str(work), str(bare))
    RepositoryFolder.objects.create(path=str(bare), owner=project.owner)
    repository.push_url = str(bare)
    repository.save()
    other = tmp_path / "repos" / "other"
    git(tmp_path, "clone", "--quiet", str(bare), str(other))
    moved = commit(other, "Moved on the forge", {"README": "moved\n"})
    git(other, "push", "--quiet", "origin", "main")

    assert base_head(repository=repository, fetch_for=project.owner) == moved
    assert git(work, "rev-parse", REMOTE_BASE_REF.format(base="main")) == moved
    assert git(work, "rev-parse", "main") != moved  # the local base branch is left alone


def test_the_repositorys_merge_driver_and_hooks_never_run(setup) -> None:  # type: ignore[no-untyped-def]
    repository, work, tree = setup
    git_dir = work / ".git"
    witness = git_dir / "objects" / "driver-ran"
    # A driver that "resolves" by taking the branch's side, and says it ran.
    git(work, "config", "merge.evil.driver", f"touch {witness}; cp %A %A.bak; exit 0")
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text("* merge=evil\n")
    hook_witness = git_dir / "hook-ran"
    for name in ("reference-transaction", "post-merge", "post-commit", "post-checkout"):
        hook = git_dir / "hooks" / name
        hook.write_text(f"#!/bin/sh\ntouch {hook_witness}\n")
        hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
    moved = commit(work, "add returns an int", {"calc.py": CALC.replace("return a - b", "return int(a) - int(b)", 1)})
    hook_witness.unlink(missing_ok=True)  # the fixture's own commit on main ran them

    result = branch_take_base(
        repository=repository, branch=BRANCH, worktree=tree, base_commit=moved, pushed=False, message="Merge\n"
    )
    # Git's own merge: the conflict is there (the driver would have hidden it).
    assert result.conflicted_paths == ["calc.py"]
    assert not witness.exists() and not hook_witness.exists()


def test_the_approval_merge_never_runs_the_repositorys_merge_driver(setup) -> None:  # type: ignore[no-untyped-def]
    repository, work, _ = setup
    witness = work / ".git" / "objects" / "driver-ran"
    git(work, "config", "merge.evil.driver", f"touch {witness}; exit 0")
    (work / ".git" / "info").mkdir(exist_ok=True)
    (work / ".git" / "info" / "attributes").write_text("* merge=evil\n")
    commit(work, "add returns an int", {"calc.py": CALC.replace("return a - b", "return int(a) - int(b)", 1)})

    result = branch_merge(repository=repository, branch=BRANCH)
    assert (result.merged, result.conflicts) == (False, ["calc.py"])
    assert not witness.exists()


# --- the setting: the page, the API (400 for a bad value), the admin


def test_the_setting_is_set_over_the_api_and_a_bad_value_is_a_400(owner_client, project, setup) -> None:  # type: ignore[no-untyped-def]
    repository, _, _ = setup
    url = f"/api/projects/{project.pk}/repository/forge"
    bad = owner_client.put(url, {"base_update": "squash"}, format="json")
    assert bad.status_code == 400 and "base_update" in bad.json()["extra"]["fields"], bad.json()
    saved = owner_client.put(url, {"base_update": "rebase"}, format="json")
    assert saved.status_code == 200 and saved.json()["base_update"] == "rebase", saved.json()
    repository.refresh_from_db()
    assert repository.base_update == BaseUpdate.REBASE
    # Left out: kept.
    assert owner_client.put(url, {}, format="json").json()["base_update"] == "rebase"


def test_the_page_shows_the_setting_with_its_warning_and_saves_it(client, owner, project, setup) -> None:  # type: ignore[no-untyped-def]
    repository, _, _ = setup
    client.force_login(owner)
    page = client.get(f"/projects/{project.pk}/repository").content.decode()
    assert 'name="base_update"' in page and "never force-pushes unasked" in page
    saved = client.post(f"/projects/{project.pk}/repository/forge", {"base_update": "rebase"}, follow=True)
    assert saved.status_code == 200
    repository.refresh_from_db()
    assert repository.base_update == BaseUpdate.REBASE


def test_the_admin_edits_the_setting(admin_client, setup) -> None:  # type: ignore[no-untyped-def]
    repository, _, _ = setup
    page = admin_client.get(f"/admin/repos/repository/{repository.pk}/change/").content.decode()
    assert 'name="base_update"' in page
