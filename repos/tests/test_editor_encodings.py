"""The Coder's editor on real code (repos/editor.py, repos/text_files.py): files in their
own encoding, and files over the size limit."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from repos import editor
from repos.editor import editor_run
from repos.tests.test_services import make_repo

EDIT = "str_replace_based_edit_tool"
LATIN1_CRLF = b"# caf\xe9 cr\xe8me\r\nname = 'Jos\xe9'\r\n"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "app", {"README.md": "# App\n"})


def run(worktree: Path, name: str = EDIT, **tool_input: object) -> editor.ToolOutcome:
    return editor_run(worktree, name, dict(tool_input))


def leftovers(folder: Path) -> list[str]:
    return [path.name for path in folder.iterdir() if path.name.startswith(".autocoder-edit-")]


def test_a_latin1_file_is_viewed_decoded_and_edited_in_latin1_with_crlf_kept(repo: Path) -> None:
    (repo / "legacy.py").write_bytes(LATIN1_CRLF)
    viewed = run(repo, command="view", path="legacy.py")
    assert not viewed.is_error, viewed.content
    assert viewed.content.splitlines() == [
        "(latin-1: shown decoded; edits are written back in latin-1)",
        "     1\t# café crème",
        "     2\tname = 'José'",
    ]
    assert "\r" not in viewed.content

    replaced = run(repo, command="str_replace", path="legacy.py", old_str="'José'", new_str="'Jürgen'\nage = 1")
    assert not replaced.is_error, replaced.content
    assert "legacy.py (latin-1, kept)" in replaced.content and "     2\tname = 'Jürgen'" in replaced.content
    assert (repo / "legacy.py").read_bytes() == b"# caf\xe9 cr\xe8me\r\nname = 'J\xfcrgen'\r\nage = 1\r\n"

    inserted = run(repo, command="insert", path="legacy.py", insert_line=0, new_str="# -*- coding: latin-1 -*- ½")
    assert not inserted.is_error, inserted.content
    assert (repo / "legacy.py").read_bytes() == (
        b"# -*- coding: latin-1 -*- \xbd\r\n# caf\xe9 cr\xe8me\r\nname = 'J\xfcrgen'\r\nage = 1\r\n"
    )


def test_a_character_latin1_cannot_hold_refuses_the_edit_and_leaves_the_file(repo: Path) -> None:
    (repo / "legacy.py").write_bytes(LATIN1_CRLF)
    for call in (
        {"command": "str_replace", "path": "legacy.py", "old_str": "café", "new_str": "café €5 ☕"},
        {"command": "insert", "path": "legacy.py", "insert_line": 1, "new_str": "price = '€'"},
    ):
        refused = editor_run(repo, EDIT, call)
        assert refused.is_error and refused.changed_path is None
        assert "No change was made: legacy.py is latin-1, which cannot hold '€' (U+20AC)" in refused.content
        assert "\\u20ac" in refused.content and "&#x20AC;" in refused.content and "rewrite" in refused.content
    assert (repo / "legacy.py").read_bytes() == LATIN1_CRLF
    assert leftovers(repo) == []


@pytest.mark.parametrize(
    ("bom", "codec", "label"),
    [
        (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16 LE with a BOM"),
        (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16 BE with a BOM"),
    ],
)
def test_utf16_with_a_bom_round_trips(repo: Path, bom: bytes, codec: str, label: str) -> None:
    (repo / "strings.txt").write_bytes(bom + "héllo\r\nwörld\r\n".encode(codec))
    viewed = run(repo, command="view", path="strings.txt")
    assert viewed.content.splitlines() == [
        f"({label}: shown decoded; edits are written back in {label})",
        "     1\théllo",
        "     2\twörld",
    ]
    replaced = run(repo, command="str_replace", path="strings.txt", old_str="wörld", new_str="wörld €\n☕")
    assert not replaced.is_error, replaced.content
    assert (repo / "strings.txt").read_bytes() == bom + "héllo\r\nwörld €\r\n☕\r\n".encode(codec)


def test_delete_file_of_a_file_create_would_re_encode_needs_force(repo: Path) -> None:
    (repo / "legacy.py").write_bytes(LATIN1_CRLF)
    (repo / "bom.txt").write_bytes(b"\xef\xbb\xbfhi\n")
    for path, label in (("legacy.py", "latin-1"), ("bom.txt", "UTF-8 with a BOM")):
        refused = run(repo, "delete_file", path=path)
        assert refused.is_error and refused.changed_path is None
        assert f"{path} was not deleted: it is {label}" in refused.content and "force: true" in refused.content
    assert (repo / "legacy.py").read_bytes() == LATIN1_CRLF and (repo / "bom.txt").exists()
    assert "force must be true or false" in run(repo, "delete_file", path="legacy.py", force="yes").content

    forced = run(repo, "delete_file", path="legacy.py", force=True)
    assert not forced.is_error and forced.changed_path == "legacy.py" and not (repo / "legacy.py").exists()
    assert not run(repo, command="create", path="legacy.py", file_text="# café\n").is_error
    assert (repo / "legacy.py").read_bytes() == "# café\n".encode()
    (repo / "blob.bin").write_bytes(b"\x89PNG\x00\x00")  # binary: no text encoding to lose
    assert not run(repo, "delete_file", path="blob.bin").is_error
    assert "force" in editor.DELETE_FILE.input_schema["properties"]


def big_text(lines: int) -> bytes:
    return "".join(f"row {n:08d} = '{'x' * 14}'\n" for n in range(1, lines + 1)).encode()


def test_a_3_mb_file_is_viewed_by_range_and_edited_with_str_replace(repo: Path) -> None:
    content = big_text(100_000)
    assert 3_000_000 <= len(content) > editor.MAX_FILE_BYTES
    (repo / "big.py").write_bytes(content)

    part = run(repo, command="view", path="big.py", view_range=[50_000, 50_001])
    assert part.content == " 50000\trow 00050000 = 'xxxxxxxxxxxxxx'\n 50001\trow 00050001 = 'xxxxxxxxxxxxxx'"
    whole = run(repo, command="view", path="big.py")
    assert whole.is_error and "100000 lines" in whole.content and "view_range" in whole.content
    capped = editor_run(repo, EDIT, {"command": "view", "path": "big.py", "view_range": [1, -1]}, max_characters=300)
    assert len(capped.content) < 450 and "truncated at 300 characters" in capped.content
    assert "100000 lines" in capped.content

    replaced = run(repo, command="str_replace", path="big.py", old_str="row 00077777 =", new_str="row 77777 =")
    assert not replaced.is_error and replaced.changed_path == "big.py", replaced.content
    expected = content.replace(b"row 00077777 =", b"row 77777 =")
    assert (repo / "big.py").read_bytes() == expected
    inserted = run(repo, command="insert", path="big.py", insert_line=100_000, new_str="# end")
    assert not inserted.is_error and (repo / "big.py").read_bytes() == expected + b"# end\n"
    several = run(repo, command="str_replace", path="big.py", old_str="'xxxxxxxxxxxxxx'", new_str="''")
    assert several.is_error and "100000 times" in several.content and "lines 1, 2, 3," in several.content
    missing = run(repo, command="str_replace", path="big.py", old_str="nowhere", new_str="x")
    assert missing.is_error and "does not appear verbatim" in missing.content


def test_a_25_mb_file_is_refused_for_edits_but_viewed_by_range(repo: Path) -> None:
    content = big_text(820_000)
    assert len(content) > 25_000_000
    (repo / "huge.sql").write_bytes(content)
    for call in (
        {"command": "str_replace", "path": "huge.sql", "old_str": "row 00000001 =", "new_str": "x"},
        {"command": "insert", "path": "huge.sql", "insert_line": 0, "new_str": "x"},
    ):
        refused = editor_run(repo, EDIT, call)
        assert refused.is_error
        assert f"huge.sql is {len(content)} bytes, over the editor's limit of 20000000 bytes for an edit" in (
            refused.content
        )
    assert (repo / "huge.sql").stat().st_size == len(content)
    last = run(repo, command="view", path="huge.sql", view_range=[820_000, -1])
    assert last.content == "820000\trow 00820000 = 'xxxxxxxxxxxxxx'"
    assert run(repo, command="create", path="new.sql", file_text="x" * (editor.MAX_FILE_BYTES + 1)).is_error


def test_a_long_line_is_cut_while_read_and_the_lines_after_it_keep_their_numbers(repo: Path) -> None:
    (repo / "app.min.js").write_bytes(b"var a=1;" * 400_000 + b"\r\nsecond\r\nthird")
    first = editor_run(repo, EDIT, {"command": "view", "path": "app.min.js", "view_range": [1, 1]}, max_characters=300)
    assert len(first.content) < 450 and "truncated at 300 characters" in first.content
    after = editor_run(repo, EDIT, {"command": "view", "path": "app.min.js", "view_range": [2, -1]}, max_characters=300)
    assert after.content == "     2\tsecond\n     3\tthird"
