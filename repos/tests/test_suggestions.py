"""Suggested setup and test command from a checkout's files: per ecosystem, combined,
malformed files, links out of the folder, bounds."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from repos.suggestions import LINK_REFUSED, MAX_FILE_BYTES, NOTHING_RECOGNISED, Suggestion, repository_suggest


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def suggest(tmp_path: Path, files: dict[str, str]) -> Suggestion:
    return repository_suggest(path=write(tmp_path / "checkout", files))


PYPROJECT_UV = """\
[project]
name = "app"
version = "0.1.0"
dependencies = ["django>=5"]

[dependency-groups]
dev = ["pytest>=8", "pytest-django"]
"""

PYPROJECT_POETRY = """\
[tool.poetry]
name = "app"

[tool.poetry.dependencies]
python = "^3.12"

[tool.poetry.group.dev.dependencies]
pytest = "^8"
"""

PYPROJECT_EXTRAS = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "lib"
version = "1"

[project.optional-dependencies]
docs = ["sphinx"]
test = ["pytest", "hypothesis"]
dev = ["ruff"]
"""


def test_nothing_recognised_is_empty_with_a_reason(tmp_path: Path) -> None:
    suggestion = suggest(tmp_path, {"README.md": "hello\n", "Makefile": "build:\n\tcc x.c\n"})
    assert suggestion == Suggestion(setup_script="", test_command="", reasons=[NOTHING_RECOGNISED])


def test_a_missing_folder_suggests_nothing(tmp_path: Path) -> None:
    assert repository_suggest(path=tmp_path / "gone").test_command == ""


def test_uv(tmp_path: Path) -> None:
    suggestion = suggest(tmp_path, {"pyproject.toml": PYPROJECT_UV, "uv.lock": "version = 1\n"})
    assert suggestion.setup_script == "uv sync --frozen"
    assert suggestion.test_command == "pytest -q"
    assert suggestion.reasons == ["uv.lock: uv sync --frozen; pytest is a dependency: pytest -q."]


def test_poetry(tmp_path: Path) -> None:
    suggestion = suggest(tmp_path, {"pyproject.toml": PYPROJECT_POETRY, "poetry.lock": "# lock\n"})
    assert suggestion.setup_script == "POETRY_VIRTUALENVS_IN_PROJECT=true poetry install --no-interaction"
    assert suggestion.test_command == "pytest -q"


def test_requirements_files_into_a_venv(tmp_path: Path) -> None:
    suggestion = suggest(
        tmp_path,
        {
            "requirements.txt": "flask==3.0\n",
            "requirements-dev.txt": "-r requirements.txt\nPyTest>=8 ; python_version >= '3.9'\n",
            "requirements-docs.txt": "sphinx\n",
        },
    )
    assert suggestion.setup_script == (
        "python3 -m venv .venv\n.venv/bin/pip install -r requirements.txt -r requirements-dev.txt"
    )
    assert suggestion.test_command == "pytest -q"
    assert "requirements.txt, requirements-dev.txt: pip install -r into a venv." in suggestion.reasons


def test_an_installable_pyproject_with_a_test_extra(tmp_path: Path) -> None:
    suggestion = suggest(tmp_path, {"pyproject.toml": PYPROJECT_EXTRAS, "tox.ini": "[tox]\nenvlist = py312\n"})
    assert suggestion.setup_script == "python3 -m venv .venv\n.venv/bin/pip install -e '.[test]'"
    assert suggestion.test_command == "pytest -q"
    assert "tox.ini: tox sessions exist (not run; pytest is run directly)." in suggestion.reasons


def test_the_dev_extra_when_there_is_no_test_one(tmp_path: Path) -> None:
    pyproject = PYPROJECT_EXTRAS.replace('test = ["pytest", "hypothesis"]\n', "")
    suggestion = suggest(tmp_path, {"pyproject.toml": pyproject})
    assert suggestion.setup_script == "python3 -m venv .venv\n.venv/bin/pip install -e '.[dev]'"
    assert suggestion.test_command == ""  # nothing says pytest


def test_a_tests_folder_means_pytest_even_when_no_dependency_names_it(tmp_path: Path) -> None:
    files = {"setup.py": "from setuptools import setup\nsetup()\n", "tests/unit/test_app.py": "def test(): pass\n"}
    suggestion = suggest(tmp_path, files)
    assert suggestion.setup_script == (
        "python3 -m venv .venv\n.venv/bin/pip install -e .\n.venv/bin/pip install pytest"
    )
    assert suggestion.test_command == "pytest -q"
    assert "Python: tests/ holds test modules: pytest -q." in suggestion.reasons


def test_test_modules_are_looked_for_only_a_few_levels_down(tmp_path: Path) -> None:
    shallow = suggest(tmp_path / "shallow", {"setup.py": "", "tests/a/b/test_x.py": ""})
    deep = suggest(tmp_path / "deep", {"setup.py": "", "tests/a/b/c/test_x.py": ""})
    assert (shallow.test_command, deep.test_command) == ("pytest -q", "")


def test_a_tool_only_pyproject_installs_nothing(tmp_path: Path) -> None:
    suggestion = suggest(tmp_path, {"pyproject.toml": "[tool.ruff]\nline-length = 100\n"})
    assert suggestion.setup_script == "" and suggestion.test_command == ""


@pytest.mark.parametrize(
    ("lockfile", "install", "test"),
    [
        ("package-lock.json", "npm ci", "npm test"),
        ("yarn.lock", "yarn install --frozen-lockfile", "yarn test"),
        ("pnpm-lock.yaml", "pnpm install --frozen-lockfile", "pnpm test"),
        (None, "npm install", "npm test"),
    ],
)
def test_node_lockfiles(tmp_path: Path, lockfile: str | None, install: str, test: str) -> None:
    files = {"package.json": json.dumps({"name": "web", "scripts": {"test": "vitest run", "build": "vite build"}})}
    if lockfile:
        files[lockfile] = "{}\n"
    suggestion = suggest(tmp_path, files)
    assert (suggestion.setup_script, suggestion.test_command) == (install, test)
    if lockfile == "package-lock.json":
        assert suggestion.reasons == ["package.json has a test script: npm test; package-lock.json: npm ci."]


def test_npms_default_test_script_is_no_test(tmp_path: Path) -> None:
    default = 'echo "Error: no test specified" && exit 1'
    suggestion = suggest(tmp_path, {"package.json": json.dumps({"scripts": {"test": default}})})
    assert suggestion.setup_script == "npm install" and suggestion.test_command == ""
    assert suggestion.reasons == ["package.json has no test script; no lockfile: npm install."]


def test_a_makefile_test_target_comes_first(tmp_path: Path) -> None:
    suggestion = suggest(
        tmp_path,
        {
            "Makefile": "TEST := x\n.PHONY: test\n\nbuild:\n\tgo build\n\ntest: build\n\tgo test ./...\n",
            "go.mod": "module example.com/app\n\ngo 1.22\n",
        },
    )
    assert suggestion.setup_script == "go mod download"
    assert suggestion.test_command == "make test"
    assert suggestion.reasons == ["Makefile has a test target: make test.", "go.mod: go mod download, go test ./..."]


def test_a_make_variable_named_test_is_no_target(tmp_path: Path) -> None:
    assert suggest(tmp_path, {"Makefile": "test := unit\ntest ?= x\n"}).test_command == ""


def test_go_and_rust(tmp_path: Path) -> None:
    go = suggest(tmp_path / "go", {"go.mod": "module example.com/app\n"})
    assert (go.setup_script, go.test_command) == ("go mod download", "go test ./...")
    rust = suggest(tmp_path / "rust", {"Cargo.toml": '[package]\nname = "app"\nversion = "0.1.0"\n'})
    assert (rust.setup_script, rust.test_command) == ("cargo fetch", "cargo test")


def test_several_ecosystems_combine_their_setup_and_python_tests_come_before_node(tmp_path: Path) -> None:
    suggestion = suggest(
        tmp_path,
        {
            "pyproject.toml": PYPROJECT_UV,
            "uv.lock": "",
            "package.json": json.dumps({"scripts": {"test": "jest"}}),
            "package-lock.json": "{}",
            "Cargo.toml": '[package]\nname = "ext"\n',
        },
    )
    assert suggestion.setup_script == "uv sync --frozen\nnpm ci\ncargo fetch"
    assert suggestion.test_command == "pytest -q"
    assert len(suggestion.reasons) == 3


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"pyproject.toml": "[project\nname = 'x'"}, "Could not read pyproject.toml: it is not valid TOML."),
        ({"package.json": "{'scripts': "}, "Could not read package.json: it is not valid JSON."),
        ({"Cargo.toml": "[package\n"}, "Could not read Cargo.toml: it is not valid TOML."),
        ({"go.mod": "nonsense\n"}, "Could not read go.mod: it names no module."),
        ({"package.json": "[" * 100_000}, "Could not read package.json: it is not valid JSON."),
        ({"pyproject.toml": "a = " + "[" * 100_000}, "Could not read pyproject.toml: it is not valid TOML."),
    ],
)
def test_malformed_files_are_reasons_not_exceptions(tmp_path: Path, files: dict[str, str], reason: str) -> None:
    suggestion = suggest(tmp_path, files)
    assert reason in suggestion.reasons


def test_binary_and_oversized_files_are_not_read(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "package.json").write_bytes(b"\xff\xfe\x00binary")
    (root / "Cargo.toml").write_text("# " + "x" * MAX_FILE_BYTES)
    suggestion = repository_suggest(path=root)
    assert "Could not read package.json: it is not UTF-8 text." in suggestion.reasons
    assert f"Could not read Cargo.toml: it is larger than {MAX_FILE_BYTES // 1024} KB." in suggestion.reasons
    assert suggestion.setup_script == "" and suggestion.test_command == ""


def test_links_out_of_the_folder_are_not_followed(tmp_path: Path) -> None:
    outside = write(
        tmp_path / "outside",
        {
            "package.json": json.dumps({"scripts": {"test": "steal"}}),
            "requirements.txt": "pytest\n",
            "tests/test_x.py": "",
        },
    )
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "package.json").symlink_to(outside / "package.json")
    (root / "requirements.txt").symlink_to(outside / "requirements.txt")
    (root / "tests").symlink_to(outside / "tests")
    suggestion = repository_suggest(path=root)
    assert suggestion.setup_script == "" and suggestion.test_command == ""
    assert LINK_REFUSED.format(name="package.json") in suggestion.reasons
    assert LINK_REFUSED.format(name="requirements.txt") in suggestion.reasons
    assert suggestion.reasons.count(LINK_REFUSED.format(name="package.json")) == 1


def test_links_inside_the_folder_are_followed(tmp_path: Path) -> None:
    root = write(tmp_path / "checkout", {"config/go.mod": "module example.com/app\n"})
    (root / "go.mod").symlink_to("config/go.mod")
    assert repository_suggest(path=root).test_command == "go test ./..."


def test_a_link_into_git_is_not_followed(tmp_path: Path) -> None:
    root = write(tmp_path / "checkout", {".git/config": "[core]\n"})
    (root / "Cargo.toml").symlink_to(".git/config")
    suggestion = repository_suggest(path=root)
    assert suggestion.test_command == ""
    assert LINK_REFUSED.format(name="Cargo.toml") in suggestion.reasons


def test_a_fifo_does_not_hang(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    root.mkdir()
    os.mkfifo(root / "package.json")
    os.mkfifo(root / "requirements.txt")
    suggestion = repository_suggest(path=root)
    assert suggestion.test_command == ""
