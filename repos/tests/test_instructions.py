from __future__ import annotations

from pathlib import Path

from repos.instructions import INSTRUCTIONS_MAX_BYTES, repository_instructions


def test_agents_md_is_preferred(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("agents\n")
    (tmp_path / "CLAUDE.md").write_text("claude\n")
    assert repository_instructions(tmp_path) == ("AGENTS.md", "agents")


def test_none_without_a_file(tmp_path: Path) -> None:
    assert repository_instructions(tmp_path) is None


def test_a_directory_or_binary_file_is_skipped(tmp_path: Path, caplog) -> None:
    (tmp_path / "AGENTS.md").mkdir()
    (tmp_path / "CLAUDE.md").write_bytes(b"\xff\xfe\x00bin")
    assert repository_instructions(tmp_path) is None
    assert "CLAUDE.md" in caplog.text


def test_undecodable_text_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes(b"caf\xe9 latin-1")
    (tmp_path / "CLAUDE.md").write_text("fallback")
    assert repository_instructions(tmp_path) == ("CLAUDE.md", "fallback")


def test_a_symlink_out_is_refused_one_inside_is_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("secret")
    tree = tmp_path / "tree"
    (tree / "docs").mkdir(parents=True)
    (tree / "AGENTS.md").symlink_to(outside)
    assert repository_instructions(tree) is None
    (tree / "docs" / "rules.md").write_text("inside")
    (tree / "CLAUDE.md").symlink_to(tree / "docs" / "rules.md")
    assert repository_instructions(tree) == ("CLAUDE.md", "inside")


def test_a_long_file_is_cut_on_a_character_boundary(tmp_path: Path) -> None:
    content = "é" * INSTRUCTIONS_MAX_BYTES  # two bytes each
    (tmp_path / "AGENTS.md").write_text(content)
    name, text = repository_instructions(tmp_path) or ("", "")
    assert name == "AGENTS.md"
    assert text.endswith(f"[truncated: the file is {len(content.encode())} bytes]")
    assert text.startswith("é" * (INSTRUCTIONS_MAX_BYTES // 2))
    assert len(text.split("\n")[0].encode()) == INSTRUCTIONS_MAX_BYTES
