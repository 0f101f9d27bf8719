"""The Coder's editing tools (repos/editor.py) on real git repositories in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from repos import editor, tools
from repos.editor import DELETE_FILE, EDITOR_TOOL, SEARCH_CODE, editor_run
from repos.tests.test_services import git, make_repo

EDIT = "str_replace_based_edit_tool"

CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "app", {"calc.py": CALC, "pkg/mod.py": "X = 1\n", "README.md": "# App\n"})


def run(worktree: Path, name: str = EDIT, **tool_input: object) -> editor.ToolOutcome:
    return editor_run(worktree, name, dict(tool_input))


def test_tool_definitions() -> None:
    assert EDITOR_TOOL == {"type": "text_editor_20250728", "name": EDIT, "max_characters": 20_000}
    assert SEARCH_CODE.name == "search_code" and "fixed_string" in SEARCH_CODE.input_schema["properties"]
    assert DELETE_FILE.as_api()["input_schema"]["required"] == ["path"]


def test_one_line_replace_in_a_long_file_changes_exactly_that_line(tmp_path: Path) -> None:
    big = "".join(f"value_{n} = {n}\n" for n in range(1, 2001))
    worktree = make_repo(tmp_path / "big", {"big.py": big})
    outcome = run(worktree, command="str_replace", path="big.py", old_str="value_1234 = 1234", new_str="value_1234 = 0")
    assert not outcome.is_error, outcome.content
    assert outcome.changed_path == "big.py"
    assert "  1234\tvalue_1234 = 0" in outcome.content
    diff = git(worktree, "diff", "--unified=0")
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert changed == ["-value_1234 = 1234", "+value_1234 = 0"]
    assert git(worktree, "diff", "--numstat") == "1\t1\tbig.py"


def test_replace_no_match_then_several_then_one(repo: Path) -> None:
    missing = run(repo, command="str_replace", path="calc.py", old_str="def add(a,b):\n    return a+b", new_str="x")
    assert missing.is_error and missing.changed_path is None
    assert "does not appear verbatim" in missing.content
    assert "     1\tdef add(a, b):" in missing.content and "     2\t    return a + b" in missing.content
    assert (repo / "calc.py").read_text() == CALC

    several = run(repo, command="str_replace", path="calc.py", old_str="(a, b):", new_str="(x, y):")
    assert several.is_error and "2 times" in several.content and "lines 1, 5" in several.content
    assert (repo / "calc.py").read_text() == CALC

    once = run(repo, command="str_replace", path="calc.py", old_str="def sub(a, b):", new_str="def minus(a, b):")
    assert not once.is_error and once.changed_path == "calc.py"
    assert (repo / "calc.py").read_text() == CALC.replace("def sub", "def minus")


def test_replace_with_missing_or_ill_typed_parameters(repo: Path) -> None:
    assert "old_str is required" in run(repo, command="str_replace", path="calc.py", new_str="x").content
    assert "old_str must be a string" in run(repo, command="str_replace", path="calc.py", old_str=3).content
    assert "path is required" in run(repo, command="str_replace", old_str="a").content
    deleted = run(repo, command="str_replace", path="calc.py", old_str="\n\ndef sub(a, b):\n    return a - b\n")
    assert not deleted.is_error and (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_create_makes_new_files_only(repo: Path) -> None:
    created = run(repo, command="create", path="new/deep/file.py", file_text="print('hi')\n")
    assert not created.is_error and created.changed_path == "new/deep/file.py"
    assert (repo / "new/deep/file.py").read_bytes() == b"print('hi')\n"
    again = run(repo, command="create", path="calc.py", file_text="gone\n")
    assert again.is_error and "already exists" in again.content and "str_replace" in again.content
    assert (repo / "calc.py").read_text() == CALC
    assert run(repo, command="create", path="x.py").is_error


def test_insert_at_the_top_and_at_the_end(repo: Path) -> None:
    top = run(repo, command="insert", path="calc.py", insert_line=0, new_str='"""Calc."""')
    assert not top.is_error and top.changed_path == "calc.py"
    assert (repo / "calc.py").read_text() == '"""Calc."""\n' + CALC
    end = run(repo, command="insert", path="calc.py", insert_line=7, new_str="\ndef mul(a, b):\n    return a * b\n")
    assert not end.is_error, end.content
    assert (repo / "calc.py").read_text() == '"""Calc."""\n' + CALC + "\ndef mul(a, b):\n    return a * b\n"
    middle = run(repo, command="insert", path="pkg/mod.py", insert_line=1, new_str="Y = 2")
    assert not middle.is_error and (repo / "pkg/mod.py").read_text() == "X = 1\nY = 2\n"


def test_insert_line_out_of_bounds_or_ill_typed(repo: Path) -> None:
    past = run(repo, command="insert", path="calc.py", insert_line=7, new_str="x")
    assert past.is_error and "out of bounds" in past.content and "0 to 6" in past.content
    assert run(repo, command="insert", path="calc.py", insert_line=-1, new_str="x").is_error
    assert "must be an integer" in run(repo, command="insert", path="calc.py", insert_line="1", new_str="x").content
    assert "insert_line is required" in run(repo, command="insert", path="calc.py", new_str="x").content
    assert (repo / "calc.py").read_text() == CALC


def test_insert_after_a_last_line_without_newline(repo: Path) -> None:
    (repo / "n.txt").write_text("a\nb")
    assert not run(repo, command="insert", path="n.txt", insert_line=2, new_str="c").is_error
    assert (repo / "n.txt").read_text() == "a\nb\nc"


def test_view_a_file_whole_and_in_part(repo: Path) -> None:
    whole = run(repo, command="view", path="calc.py")
    assert not whole.is_error and whole.changed_path is None
    assert whole.content.splitlines()[0] == "     1\tdef add(a, b):"
    assert whole.content.splitlines()[-1] == "     6\t    return a - b"
    part = run(repo, command="view", path="calc.py", view_range=[5, -1])
    assert part.content == "     5\tdef sub(a, b):\n     6\t    return a - b"
    assert run(repo, command="view", path="calc.py", view_range=[2, 2]).content == "     2\t    return a + b"


@pytest.mark.parametrize("view_range", [[0, 2], [7, 8], [3, 2], [1, 7], [1], "1-2", [True, 2]])
def test_view_range_out_of_bounds_or_ill_typed(repo: Path, view_range: object) -> None:
    outcome = run(repo, command="view", path="calc.py", view_range=view_range)
    assert outcome.is_error and "view_range" in outcome.content


def test_view_output_is_truncated_with_a_note(repo: Path) -> None:
    (repo / "long.txt").write_text("".join(f"line {n}\n" for n in range(3000)))
    outcome = editor_run(repo, EDIT, {"command": "view", "path": "long.txt"}, max_characters=500)
    assert len(outcome.content) < 650 and "truncated at 500 characters" in outcome.content
    assert "view_range" in outcome.content and "3000 lines" in outcome.content


def test_view_a_folder_lists_two_levels_without_hidden_items(repo: Path) -> None:
    (repo / "pkg/sub/deeper").mkdir(parents=True)
    (repo / "pkg/sub/deeper/far.py").write_text("")
    (repo / ".env").write_text("SECRET=1\n")
    listing = run(repo, command="view", path=".")
    assert not listing.is_error
    lines = listing.content.splitlines()[1:]
    assert lines == ["README.md", "calc.py", "pkg/", "pkg/mod.py", "pkg/sub/"]
    assert run(repo, command="view", path="pkg").content.splitlines()[1:] == [
        "pkg/mod.py",
        "pkg/sub/",
        "pkg/sub/deeper/",
    ]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../outside.txt", "'..'"),
        ("pkg/../../outside.txt", "'..'"),
        ("/etc/passwd", "Absolute paths"),
        (".git/config", ".git"),
        ("pkg/.git/x", ".git"),
        ("out/passwd", "symbolic link"),
        ("inside_link.py", "symbolic link"),
    ],
)
def test_path_escapes_are_refused_for_every_command(repo: Path, path: str, message: str) -> None:
    (repo.parent / "outside.txt").write_text("secret\n")
    (repo / "out").symlink_to("/etc")
    (repo / "inside_link.py").symlink_to("calc.py")
    config = (repo / ".git/config").read_bytes()
    calls = [
        {"command": "view", "path": path},
        {"command": "create", "path": path, "file_text": "x\n"},
        {"command": "str_replace", "path": path, "old_str": "secret", "new_str": "x"},
        {"command": "insert", "path": path, "insert_line": 0, "new_str": "x"},
    ]
    for call in calls:
        outcome = editor_run(repo, EDIT, call)
        assert outcome.is_error and message in outcome.content and "secret" not in outcome.content, (call, outcome)
    deleted = run(repo, "delete_file", path=path)
    assert deleted.is_error and message in deleted.content
    assert (repo.parent / "outside.txt").read_text() == "secret\n"
    assert (repo / ".git/config").read_bytes() == config
    assert (repo / "calc.py").read_text() == CALC


def test_crlf_file_keeps_every_crlf_byte_for_byte(tmp_path: Path) -> None:
    content = b"first\r\nsecond\r\nthird\r\nfourth\r\n"
    worktree = make_repo(tmp_path / "crlf", {"w.txt": ""})
    (worktree / "w.txt").write_bytes(content)
    replaced = run(worktree, command="str_replace", path="w.txt", old_str="second\nthird", new_str="2nd\nthree\n3b")
    assert not replaced.is_error, replaced.content
    assert (worktree / "w.txt").read_bytes() == b"first\r\n2nd\r\nthree\r\n3b\r\nfourth\r\n"
    assert not run(worktree, command="insert", path="w.txt", insert_line=5, new_str="fifth\nsixth").is_error
    assert (worktree / "w.txt").read_bytes() == b"first\r\n2nd\r\nthree\r\n3b\r\nfourth\r\nfifth\r\nsixth\r\n"
    assert "\r" not in run(worktree, command="view", path="w.txt").content


def test_utf8_bom_is_kept(repo: Path) -> None:
    (repo / "bom.txt").write_bytes(b"\xef\xbb\xbfcaf\xc3\xa9\nend\n")
    viewed = run(repo, command="view", path="bom.txt")
    assert viewed.content.splitlines()[0] == "     1\tcafé"
    assert not run(repo, command="str_replace", path="bom.txt", old_str="café", new_str="thé").is_error
    assert (repo / "bom.txt").read_bytes() == b"\xef\xbb\xbfth\xc3\xa9\nend\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\x00\x00data", "binary"),
        (b"caf\xe9" * 5000 + b"\x00", "binary"),  # a NUL anywhere, not only in the first 8 KB
        (b"\xff\xfeh\x00\x00\x00", "binary"),  # UTF-16 with a NUL character (or UTF-32)
        (b"\xef\xbb\xbfcaf\xe9\n", "not valid in UTF-8"),  # a UTF-8 BOM, then latin-1
        (b"\xff\xfea\x00\x00\xd8", "not valid in UTF-16 LE"),  # a lone surrogate
    ],
)
def test_binary_and_damaged_files_are_refused(repo: Path, content: bytes, message: str) -> None:
    (repo / "blob.bin").write_bytes(content)
    for call in (
        {"command": "view", "path": "blob.bin"},
        {"command": "str_replace", "path": "blob.bin", "old_str": "caf", "new_str": "x"},
        {"command": "insert", "path": "blob.bin", "insert_line": 0, "new_str": "x"},
    ):
        outcome = editor_run(repo, EDIT, call)
        assert outcome.is_error and message in outcome.content
    assert (repo / "blob.bin").read_bytes() == content


def test_files_over_the_size_cap_are_refused(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(editor, "MAX_FILE_BYTES", 20)
    outcome = run(repo, command="view", path="calc.py")
    assert outcome.is_error and "over the editor's limit of 20 bytes" in outcome.content
    assert run(repo, command="view", path="pkg/mod.py").content == "     1\tX = 1"


def test_missing_files_and_unknown_commands_or_tools(repo: Path) -> None:
    missing = run(repo, command="str_replace", path="nope.py", old_str="a", new_str="b")
    assert missing.is_error and "nope.py does not exist" in missing.content
    unknown = run(repo, command="rewrite", path="calc.py")
    assert unknown.is_error and "Unknown command 'rewrite'" in unknown.content and "str_replace" in unknown.content
    assert "undo_edit is not available" in run(repo, command="undo_edit", path="calc.py").content
    assert run(repo, "rm_rf", path="calc.py").is_error
    assert editor_run(repo, EDIT, ["view"]).is_error  # type: ignore[arg-type]


def test_search_code_answers_path_line_text_with_caps(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "untracked.py").write_text("def add_more():\n    pass\n")
    (repo / ".gitignore").write_text("ignored.py\n")
    (repo / "ignored.py").write_text("def add_ignored():\n")
    found = run(repo, "search_code", pattern=r"def add")
    assert not found.is_error
    assert found.content.splitlines() == ["calc.py:1: def add(a, b):", "untracked.py:1: def add_more():"]
    assert run(repo, "search_code", pattern="a + b", fixed_string=True).content == "calc.py:2:     return a + b"
    assert "No matches" in run(repo, "search_code", pattern="a + b").content  # + is a regex operator
    (repo / "many.txt").write_text("hit\n" * 30)
    monkeypatch.setattr(tools, "MAX_SEARCH_MATCHES", 5)
    capped = run(repo, "search_code", pattern="hit", path="many.txt")
    assert capped.content.splitlines()[:5] == [f"many.txt:{n}: hit" for n in range(1, 6)]
    assert capped.content.splitlines()[5] == "[… 25 more matches; narrow the pattern or path]"
    assert run(repo, "search_code", pattern="x", path="../").is_error


def test_delete_file(repo: Path) -> None:
    deleted = run(repo, "delete_file", path="pkg/mod.py")
    assert not deleted.is_error and deleted.changed_path == "pkg/mod.py"
    assert not (repo / "pkg/mod.py").exists()
    assert "does not exist" in run(repo, "delete_file", path="pkg/mod.py").content
    folder = run(repo, "delete_file", path="pkg")
    assert folder.is_error and "folder" in folder.content and (repo / "pkg").is_dir()
    assert run(repo, "delete_file", path=".").is_error
    assert run(repo, "delete_file", path=".git/HEAD").is_error and (repo / ".git/HEAD").exists()
