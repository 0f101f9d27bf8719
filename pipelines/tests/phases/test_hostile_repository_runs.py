"""A whole run on a repository whose test command turns hostile: nothing it plants runs
outside the sandbox at the next coding round (issue: "nothing a user's repository holds
ever runs as the server", finding 1, as reproduced: a submodule, the test command, one
request for changes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.tests.test_sandbox import needs_bwrap
from pipelines.models import RunStatus
from pipelines.review.services import run_request_changes
from pipelines.runs.services import run_start
from pipelines.tests.repositories import git, git_commit
from tests.fake_anthropic import EDITOR, TextReply, ToolReply
from tests.workers import drive_in_process

pytestmark = [pytest.mark.django_db, needs_bwrap]

PLAN = {"subtasks": [{"id": "s1", "title": "Fix add", "description": "add must add", "order": 1}]}
PASS = {"pass": True, "findings": []}
FIX_CALC = ToolReply(
    name=EDITOR, input={"command": "str_replace", "path": "app/calc.py", "old_str": "a - b", "new_str": "a + b"}
)
NOTE = ToolReply(name=EDITOR, input={"command": "create", "path": "NOTES.md", "file_text": "add adds\n"})
SECRET = "s3cr3t-of-the-server-the-filter-wants"


def the_test_command(mark: Path, secret: Path) -> str:
    """The project's test command: runs the checks, and makes the empty submodule folder
    a repository of its own whose clean filter, racy index and all, would run wherever
    git next looks into it."""
    payload = f"id -u > {mark}; cat {secret} >> {mark} 2>&1; cat"
    return (
        "if [ ! -d sub/.git ]; then ("
        " cd sub && git init -q && echo content > file.txt && git add -A"
        " && git -c user.name=t -c user.email=t@example.com commit -qm nested"
        f" && printf '%s\\n' '{payload}' > .git/pwn.sh"
        " && git config filter.x.clean 'sh .git/pwn.sh' && echo '* filter=x' > .gitattributes"
        " && echo changed > file.txt && git read-tree HEAD && touch -d @1 file.txt .gitattributes"
        "); fi; python3 check.py"
    )


def test_a_test_command_that_plants_a_filter_in_a_submodule_runs_nothing_as_the_server(
    fake_llm, linked, repo_root: Path, task, owner, tmp_path: Path
) -> None:
    commit = git(repo_root, "rev-parse", "HEAD")
    (repo_root / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n\turl = https://example.com/sub.git\n')
    git(repo_root, "update-index", "--add", "--cacheinfo", f"160000,{commit},sub")
    git(repo_root, "add", ".gitmodules")
    git_commit(repo_root, "Add a submodule")
    secret = tmp_path / "server-secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    mark = tmp_path / "ran-as-server"
    linked.test_command = the_test_command(mark, secret)
    linked.save()
    task.project.learn_distil = False  # the request's words are kept as written: no call to script
    task.project.save()
    fake_llm.script(
        ToolReply(input=PLAN),
        FIX_CALC,
        TextReply("Fixed add."),
        ToolReply(input=PASS),
        # The person asks for a note; the next coding round commits the worktree.
        NOTE,
        TextReply("Added the note."),
        ToolReply(input=PASS),
    )
    run = drive_in_process(run_start(task=task, user=owner))
    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert (Path(run.worktree_path) / "sub" / ".git" / "pwn.sh").exists()  # the test command did plant it

    run = drive_in_process(run_request_changes(run=run, feedback="Add a note saying add adds.", actor=owner))

    assert run.status == RunStatus.AWAITING_APPROVAL, run.error
    assert not mark.exists(), f"the planted filter ran outside the sandbox: {mark.read_text()[:200]!r}"
    changed = git(repo_root, "diff", "--name-only", f"{run.base_commit}..{run.branch}").splitlines()
    assert "NOTES.md" in changed and "app/calc.py" in changed
