from __future__ import annotations

import pytest

from pipelines.review.diff import diff_changes
from repos.paths import check_path


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "../secrets.txt", "a/../../b", "C:\\Windows\\x", "a\x00b", "", "  ", ".git/config", "x" * 501],
)
def test_unsafe_paths_are_refused(path: str) -> None:
    assert check_path(path) is not None


@pytest.mark.parametrize("path", ["a.py", "src/pkg/mod.py", "docs/read me.md", "a..b/c.py", ".github/workflows/ci.yml"])
def test_safe_paths_pass(path: str) -> None:
    assert check_path(path) is None


def test_new_file_diff_stats_tree_and_language() -> None:
    result = diff_changes(
        [
            {"file_path": "src/app.py", "content": "def f():\n    return 1\n", "action": "create"},
            {"file_path": "README.md", "content": "# Title\n", "action": "create"},
        ]
    )
    assert result.stats == {"files_changed": 2, "lines_added": 3, "lines_removed": 0}
    app = next(f for f in result.files if f.path == "src/app.py")
    assert app.language == "Python"
    assert app.unified.startswith("--- /dev/null\n+++ b/src/app.py\n@@ -0,0 +1,2 @@\n+def f():\n")
    assert [row.kind for row in app.rows] == ["hunk", "add", "add"]
    assert 'class="k"' in app.rows[1].html  # "def" highlighted as a keyword
    assert result.tree == [
        {"name": "src", "path": "src", "children": [{"name": "app.py", "path": "src/app.py", "action": "create"}]},
        {"name": "README.md", "path": "README.md", "action": "create"},
    ]


def test_modify_diffs_against_current_content_and_delete_removes_all() -> None:
    current = {"a.txt": "one\ntwo\nthree\n", "gone.txt": "bye\n"}
    result = diff_changes(
        [
            {"file_path": "a.txt", "content": "one\n2\nthree\n", "action": "modify"},
            {"file_path": "gone.txt", "action": "delete"},
        ],
        read_current=current.get,
    )
    a, gone = result.files
    assert (a.added, a.removed) == (1, 1)
    assert "-two\n+2\n" in a.unified
    assert [row.kind for row in a.rows] == ["hunk", "ctx", "del", "add", "ctx"]
    assert (gone.added, gone.removed) == (0, 1)
    assert "+++ /dev/null" in gone.unified


def test_bad_paths_are_reported_never_diffed() -> None:
    changes = [
        {"file_path": "../escape.py", "content": "x", "action": "create"},
        {"file_path": "ok.py", "content": "x\n", "action": "create"},
    ]
    result = diff_changes(changes)
    assert [f.path for f in result.files] == ["ok.py"]
    assert result.rejected[0]["file_path"] == "../escape.py"


def test_html_in_content_is_escaped() -> None:
    result = diff_changes([{"file_path": "x.html", "content": "<script>alert(1)</script>\n", "action": "create"}])
    assert "<script>" not in result.files[0].rows[1].html


@pytest.mark.parametrize("ending", ["\n\n", "\n\n\n"])
def test_a_one_line_change_by_the_blank_line_a_big_file_ends_with_is_one_line(ending: str) -> None:
    # Over 200 lines, difflib's matcher took the frequent blank line for junk and showed
    # this change as 2 (or 3) lines removed and added; git shows one.
    old = "".join(f"def f{number}():\n    return {number}\n\n" for number in range(250)) + "x = 1" + ending
    new = old.replace("x = 1", "x = 2")
    file = diff_changes(
        [{"file_path": "big.py", "action": "modify", "content": new}], read_current=lambda _: old
    ).files[0]
    assert (file.added, file.removed) == (1, 1)
    changed = [row for row in file.rows if row.kind in ("add", "del")]
    assert [(row.kind, row.old_line, row.new_line) for row in changed] == [("del", 751, None), ("add", None, 751)]
    assert "\n-x = 1\n+x = 2\n" in file.unified
