"""The agents' read-only tools on a real git worktree (where .git is a file)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from repos.tools import REPO_TOOLS, execute_repo_tool, file_tree


def run(worktree: Path, name: str, max_chars: int = 20_000, **tool_input: object):
    return execute_repo_tool(worktree=worktree, name=name, tool_input=dict(tool_input), max_chars=max_chars)


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "app").mkdir(parents=True)
    (repo / "app" / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
    (repo / "README.md").write_text("# Calc\n")
    (repo / "logo.png").write_bytes(b"\x89PNG\x00\x00binary")
    git = ["git", "-c", "user.name=T", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=repo, check=True)
    tree = tmp_path / "wt"
    subprocess.run([*git, "worktree", "add", "-q", "-b", "work", str(tree)], cwd=repo, check=True)
    (tree / "escape").symlink_to("/etc")
    return tree


def test_the_three_tools_are_offered() -> None:
    assert [tool.name for tool in REPO_TOOLS] == ["list_files", "read_file", "search_code"]


def test_list_files_shows_folders_and_sizes_without_git(worktree: Path) -> None:
    output = run(worktree, "list_files", path=".")
    assert not output.is_error
    assert "app/" in output.text and "README.md (7 bytes)" in output.text
    assert ".git" not in output.text
    size = (worktree / "app" / "calc.py").stat().st_size
    assert run(worktree, "list_files", path="app").text.splitlines()[1:] == [f"calc.py ({size} bytes)"]


def test_read_file_numbers_lines_and_reads_ranges(worktree: Path) -> None:
    whole = run(worktree, "read_file", path="app/calc.py")
    assert "1  def add(a, b):" in whole.text and "(lines 1-6 of 6)" in whole.text
    part = run(worktree, "read_file", path="app/calc.py", start=5, end=6)
    assert "5  def sub(a, b):" in part.text and "add" not in part.text


def test_long_output_is_cut_with_a_way_to_read_more(worktree: Path) -> None:
    (worktree / "long.txt").write_text("".join(f"line {n}\n" for n in range(5000)))
    output = run(worktree, "read_file", max_chars=1000, path="long.txt")
    assert len(output.text) < 1200 and "output cut at 1000 characters" in output.text and "start and end" in output.text


def test_search_code_answers_path_line_text(worktree: Path) -> None:
    output = run(worktree, "search_code", pattern=r"def (add|sub)\(")
    assert output.text.splitlines() == ["app/calc.py:1: def add(a, b):", "app/calc.py:5: def sub(a, b):"]
    assert run(worktree, "search_code", pattern="nothing-like-this").text.startswith("No matches")
    # A pattern that backtracks catastrophically in Python's re is linear in git grep.
    assert not run(worktree, "search_code", pattern="(a+)+$").is_error


@pytest.mark.parametrize(
    ("name", "tool_input"),
    [
        ("read_file", {"path": "../repo/app/calc.py"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("read_file", {"path": "escape/passwd"}),
        ("read_file", {"path": ".git"}),
        ("list_files", {"path": "escape"}),
        ("search_code", {"pattern": "root", "path": "escape"}),
        ("read_file", {"path": 42}),
        ("read_file", {}),
        ("read_file", {"path": "app/calc.py", "start": "one"}),
        ("read_file", {"path": "logo.png"}),
        ("read_file", {"path": "missing.py"}),
        ("list_files", {"path": "README.md"}),
        ("search_code", {"pattern": ""}),
        ("delete_everything", {}),
    ],
)
def test_bad_or_escaping_input_is_an_error_result_never_an_exception(
    worktree: Path, name: str, tool_input: dict[str, object]
) -> None:
    output = run(worktree, name, **tool_input)
    assert output.is_error and output.text
    assert "root:" not in output.text


def test_file_tree_lists_paths_and_skips_git(worktree: Path) -> None:
    tree = file_tree(worktree=worktree).splitlines()
    assert "app/calc.py" in tree and "README.md" in tree
    assert not any(line.startswith(".git") for line in tree)
    assert "first 1 shown" in file_tree(worktree=worktree, max_entries=1)
