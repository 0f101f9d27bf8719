"""Environments: a setup script run once per key in the sandbox with network, what it
produced kept and restored into every worktree as hard links, without network; stale
when a key file changes; failures and timeouts said; old ones evicted.

Real git, the real sandbox, a local package index on 127.0.0.1 (no internet)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.sandbox import sandboxed_process
from core.tests.test_sandbox import needs_bwrap
from pipelines.tests.repositories import committed_repository, git, git_commit
from repos.environments import store
from repos.environments.scripts import SetupSource, devcontainer_setup
from repos.environments.services.eviction import environments_evict
from repos.environments.services.preparing import EnvironmentBroken
from repos.environments.services.ready import (
    commands_sandbox,
    environment_in_force,
    environment_make_ready,
    environment_restore_missing,
)
from repos.models import PreparedEnvironment, PreparedEnvironmentStatus, Repository
from repos.services.linking import repository_link
from repos.services.worktrees import worktree_create
from repos.tests.package_index import PackageIndex
from repos.verify import run_project_tests

pytestmark = pytest.mark.django_db

APP_TEST = (
    "import unittest\n\nimport tinydep\n\n\n"
    "class Test(unittest.TestCase):\n    def test_double(self):\n        self.assertEqual(tinydep.double(2), 4)\n\n\n"
    "if __name__ == '__main__':\n    unittest.main()\n"
)
FILES: dict[str, str | bytes] = {
    "requirements.txt": "tinydep==1.0\n",
    "test_app.py": APP_TEST,
    ".gitignore": ".venv/\n",
}
TEST_COMMAND = "python -m unittest -v test_app"


def setup_script(index: str) -> str:
    return f"python3 -m venv .venv\n.venv/bin/pip install --no-input --index-url {index} -r requirements.txt\n"


@pytest.fixture
def package_index(tmp_path: Path):
    index = PackageIndex(tmp_path / "index")
    index.add("tinydep", "1.0", {"tinydep/__init__.py": "def double(x):\n    return 2 * x\n"})
    with index.serving():
        yield index


@pytest.fixture
def environments_root(tmp_path: Path, settings) -> Path:
    settings.ENVIRONMENTS_ROOT = str(tmp_path / "environments")
    return Path(settings.ENVIRONMENTS_ROOT)


@pytest.fixture
def repository(project, tmp_path: Path, package_index: PackageIndex, environments_root: Path) -> Repository:
    root = committed_repository(tmp_path / "repos" / "lib", FILES)
    repository = repository_link(project=project, path=str(root), test_command=TEST_COMMAND)
    repository.setup_script = setup_script(package_index.url)
    repository.save()
    return repository


def worktree(repository: Repository, tmp_path: Path, name: str) -> tuple[Path, str]:
    path = tmp_path / "worktrees" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path, worktree_create(repository=repository, branch=f"autocoder/{name}", path=path)


def ready(repository: Repository, path: Path, commit: str, log: list[str] | None = None):
    output = log if log is not None else []
    return environment_make_ready(
        repository=repository, worktree=path, commit=commit, on_output=output.append, should_cancel=lambda: False
    )


def run_tests_in(repository: Repository, path: Path):
    return run_project_tests(
        command=repository.test_command,
        worktree=path,
        on_output=lambda text: None,
        should_cancel=lambda: False,
        project=commands_sandbox(repository=repository),
    )


@needs_bwrap
def test_setup_runs_once_and_every_worktree_gets_its_environment_without_network(
    repository, tmp_path, package_index
) -> None:
    first, base = worktree(repository, tmp_path, "one")
    log: list[str] = []
    made = ready(repository, first, base, log)

    assert made.prepared_now and made.paths == [".venv"]
    prepared = PreparedEnvironment.objects.get(pk=made.prepared_id)
    assert prepared.status == PreparedEnvironmentStatus.READY and prepared.exit_code == 0
    assert prepared.source == SetupSource.PAGE and prepared.size_bytes > 0
    assert [path for path, _ in prepared.key_files] == ["requirements.txt"]
    assert any("tinydep" in request for request in package_index.requests), "pip went to the local index"
    assert "+ python3 -m venv .venv" in "".join(log), "each command is said as it starts"
    # `python` is the virtualenv's, first on PATH, and the third-party import works.
    result = run_tests_in(repository, first)
    assert result.passed, result.output
    assert "test_double" in result.output

    # A second worktree of the same base: restored, nothing downloaded, no setup run.
    requests_before = len(package_index.requests)
    second, _ = worktree(repository, tmp_path, "two")
    again = ready(repository, second, base)
    assert not again.prepared_now and again.prepared_id == made.prepared_id and again.key == made.key
    assert len(package_index.requests) == requests_before
    assert run_tests_in(repository, second).passed
    # Never committed: the worktree holds it untracked (here ignored), and git sees no change.
    assert git(second, "status", "--porcelain") == ""


@needs_bwrap
def test_a_venv_half_emptied_by_git_clean_is_restored_whole(project, tmp_path, package_index, environments_root):
    """Python's usual .gitignore ignores ``lib/`` but not ``.venv``: git lists
    ``.venv`` and ``.venv/lib`` (one path, not two), and a coding phase's ``git clean``
    takes ``.venv/bin`` but leaves ``.venv/lib``; the venv is put back whole (seen with
    python-slugify: ``pytest: not found`` after the base tests had passed)."""
    files = {**FILES, ".gitignore": "lib/\nlib64/\n*.egg-info/\n"}
    root = committed_repository(tmp_path / "repos" / "gitignored-lib", files)
    repository = repository_link(project=project, path=str(root), test_command=TEST_COMMAND)
    repository.setup_script = setup_script(package_index.url)
    repository.save()
    path, base = worktree(repository, tmp_path, "one")
    log: list[str] = []
    made = ready(repository, path, base, log)
    assert made.paths == [".venv"] and made.skipped == [], log
    assert not any("Not restored" in line for line in log), log
    assert run_tests_in(repository, path).passed

    git(path, "-c", "safe.directory=*", "clean", "-ffdq")  # what a coding phase's reset does
    assert (path / ".venv" / "lib").is_dir() and not (path / ".venv" / "bin").exists()

    restored = environment_restore_missing(repository=repository, worktree=path, ready=made.as_dict())
    assert restored == [".venv"]
    assert (path / ".venv" / "bin" / "python").exists()
    result = run_tests_in(repository, path)
    assert result.passed, result.output
    # Whole again: nothing more to restore.
    assert environment_restore_missing(repository=repository, worktree=path, ready=made.as_dict()) == []


@needs_bwrap
def test_a_command_may_replace_a_restored_file_but_never_write_into_the_kept_one(repository, tmp_path) -> None:
    first, base = worktree(repository, tmp_path, "one")
    made = ready(repository, first, base)
    second, _ = worktree(repository, tmp_path, "two")
    ready(repository, second, base)
    kept_cfg = store.prepared_folder(repository.pk, made.key) / ".venv" / "pyvenv.cfg"
    before = kept_cfg.read_text()

    with sandboxed_process(
        command="echo 'home = /evil' >> .venv/pyvenv.cfg; echo appended=$?; "
        "rm .venv/pyvenv.cfg && echo 'mine = 1' > .venv/pyvenv.cfg && echo replaced",
        workspace=second,
        limits=_limits(),
    ) as process:
        output = process.stdout.read().decode()
        process.wait()

    assert "appended=1" in output or "Permission denied" in output
    assert "replaced" in output
    assert (second / ".venv" / "pyvenv.cfg").read_text() == "mine = 1\n"
    assert kept_cfg.read_text() == before, "the kept environment is untouched"
    assert (first / ".venv" / "pyvenv.cfg").read_text() == before, "and so is every other run's"


def _limits():
    from core.sandbox import limits_from_settings

    return limits_from_settings()


@needs_bwrap
def test_a_changed_lockfile_makes_a_new_key_and_a_new_environment(repository, tmp_path, package_index) -> None:
    first, base = worktree(repository, tmp_path, "one")
    made = ready(repository, first, base)
    package_index.add("tinydep", "1.1", {"tinydep/__init__.py": "def double(x):\n    return x + x\n"})
    root = Path(repository.path)
    (root / "requirements.txt").write_text("tinydep==1.1\n")
    git_commit(root, "Bump tinydep", "-a")
    head = git(root, "rev-parse", "HEAD")

    _, key, _ = environment_in_force(repository=repository, commit=head)
    assert key != made.key
    second, _ = worktree(repository, tmp_path, "two")
    bumped = ready(repository, second, head)
    assert bumped.prepared_now and bumped.key == key
    assert PreparedEnvironment.objects.filter(repository=repository, status="ready").count() == 2


@needs_bwrap
def test_a_failing_setup_is_an_environment_broken_with_its_output(repository, tmp_path) -> None:
    repository.setup_script = "echo installing\nfalse\necho never"
    repository.save()
    path, base = worktree(repository, tmp_path, "one")

    with pytest.raises(EnvironmentBroken) as raised:
        ready(repository, path, base)

    assert "exited with status 1" in raised.value.message
    assert "Repository page" in raised.value.message
    assert "installing" in raised.value.output and "never" not in raised.value.output.replace("+ echo never", "")
    prepared = PreparedEnvironment.objects.get(repository=repository)
    assert prepared.status == PreparedEnvironmentStatus.FAILED and prepared.exit_code == 1
    assert "installing" in prepared.output
    # Nothing half-made is kept, and the build worktree is gone.
    assert not store.prepared_folder(repository.pk, prepared.key).exists()
    assert not any((store.repository_folder(repository.pk) / "builds").iterdir())


@needs_bwrap
def test_a_setup_over_its_time_limit_is_stopped_and_said(repository, tmp_path, settings) -> None:
    settings.ENVIRONMENT_SETUP_TIMEOUT_SECONDS = 2
    repository.setup_script = "sleep 30"
    repository.save()
    path, base = worktree(repository, tmp_path, "one")

    with pytest.raises(EnvironmentBroken) as raised:
        ready(repository, path, base)

    assert "did not finish within 2 s" in raised.value.message
    assert PreparedEnvironment.objects.get(repository=repository).timed_out is True


@needs_bwrap
def test_an_evicted_environment_leaves_the_runs_that_have_it_working(repository, tmp_path, settings) -> None:
    first, base = worktree(repository, tmp_path, "one")
    made = ready(repository, first, base)
    settings.ENVIRONMENT_CACHE_MAX_MB = 1  # the virtualenv alone is more than that

    assert environments_evict() == 1
    assert not PreparedEnvironment.objects.filter(pk=made.prepared_id).exists()
    assert not store.prepared_folder(repository.pk, made.key).exists()
    # The run holding hard links of it still has every file.
    assert run_tests_in(repository, first).passed
    # The next run prepares it again.
    second, _ = worktree(repository, tmp_path, "two")
    assert ready(repository, second, base).prepared_now


@needs_bwrap
def test_the_repositorys_own_setup_script_is_used_when_the_page_has_none(project, tmp_path, environments_root) -> None:
    files = {".autocoder/setup.sh": "mkdir -p build && echo made > build/marker\n", "a.txt": "a\n"}
    root = committed_repository(tmp_path / "repos" / "own", files)
    repository = repository_link(project=project, path=str(root))
    path, base = worktree(repository, tmp_path, "one")

    made = ready(repository, path, base)

    assert made.source == SetupSource.REPOSITORY
    assert (path / "build" / "marker").read_text() == "made\n"


def test_a_symlinked_setup_script_in_the_repository_is_not_one(project, tmp_path, environments_root) -> None:
    root = committed_repository(tmp_path / "repos" / "linky", {"a.txt": "a\n"})
    (root / ".autocoder").mkdir()
    os.symlink("/etc/passwd", root / ".autocoder" / "setup.sh")
    git(root, "add", "-A")
    git_commit(root, "link")
    repository = repository_link(project=project, path=str(root))

    script, key, _ = environment_in_force(repository=repository, commit=git(root, "rev-parse", "HEAD"))

    assert script is None and key == ""


def test_devcontainer_commands_are_read_as_shell_lines() -> None:
    text = """{
      // comments and trailing commas, as devcontainer.json allows
      "image": "mcr.microsoft.com/devcontainers/python:3.12",
      "updateContentCommand": ["pip", "install", "-r", "requirements dev.txt"],
      "postCreateCommand": {"npm": "npm ci", "py": "pip install -e ."},
    }"""
    script, image = devcontainer_setup(text)
    assert script == "pip install -r 'requirements dev.txt'\nnpm ci\npip install -e .\n"
    assert image == "mcr.microsoft.com/devcontainers/python:3.12"
    assert devcontainer_setup("{not json") == ("", "")


@needs_bwrap
def test_with_a_base_image_setup_and_tests_run_on_the_images_tree(project, tmp_path, environments_root, settings):
    from core.tests.test_sandbox_images import build_layout

    settings.IMAGES_ROOT = str(tmp_path / "images")
    settings.IMAGES_LOCAL_ROOT = str(tmp_path / "layouts")
    (tmp_path / "layouts").mkdir(mode=0o755)
    (tmp_path / "image-build").mkdir()
    build_layout(tmp_path / "layouts" / "base", tmp_path / "image-build")
    root = committed_repository(tmp_path / "repos" / "on-image", {"a.txt": "a\n"})
    repository = repository_link(project=project, path=str(root))
    repository.base_image = "oci:base:t"
    # The image has a shell and nothing else: builtins only.
    repository.setup_script = 'read marker < /etc/image-marker; echo "$marker $PYTHON_VERSION" > made.txt'
    repository.test_command = 'read made < made.txt; echo "tests see: $made"; test ! -e /usr/bin/python3'
    repository.save()
    path, base = worktree(repository, tmp_path, "one")

    made = ready(repository, path, base)

    assert made.prepared_now and made.paths == ["made.txt"]
    assert (path / "made.txt").read_text() == "from-the-image 3.12.7\n"
    assert PreparedEnvironment.objects.get().image == "oci:base:t"
    result = run_tests_in(repository, path)
    assert result.passed, result.output
    assert "tests see: from-the-image 3.12.7" in result.output


TINYTEST = (
    "#!/usr/bin/env node\n"
    "const fs = require('fs');\nconst path = require('path');\nlet failed = 0;\n"
    "for (const file of fs.readdirSync('test')) {\n"
    "  try { require(path.resolve('test', file)); console.log('ok', file); }\n"
    "  catch (error) { failed += 1; console.log('not ok', file, error.message); }\n"
    "}\nprocess.exit(failed ? 1 : 0);\n"
)


@needs_bwrap
def test_a_node_package_whose_tests_need_a_dev_dependency(project, tmp_path, environments_root) -> None:
    from repos.tests.npm_registry import NpmRegistry

    registry = NpmRegistry()
    manifest = {"name": "tinytest", "version": "1.0.0", "bin": {"tinytest": "bin/tinytest.js"}}
    registry.add(manifest, {"bin/tinytest.js": TINYTEST})
    package = {
        "name": "sum",
        "version": "0.1.0",
        "scripts": {"test": "tinytest"},
        "devDependencies": {"tinytest": "1.0.0"},
    }
    files = {
        "package.json": json.dumps(package),
        "index.js": "module.exports = (a, b) => a + b;\n",
        "test/sum.js": "const assert = require('assert');\nassert.strictEqual(require('..')(2, 3), 5);\n",
    }
    root = committed_repository(tmp_path / "repos" / "sum", files)
    repository = repository_link(project=project, path=str(root), test_command="npm test")
    with registry.serving():
        repository.setup_script = f"npm install --registry={registry.url} --no-audit --no-fund"
        repository.save()
        # Before setup: `npm test` cannot find its runner, as on a fresh clone.
        bare, base = worktree(repository, tmp_path, "bare")
        assert not run_tests_in(repository, bare).passed

        path, _ = worktree(repository, tmp_path, "one")
        made = ready(repository, path, base)

    assert made.prepared_now and "node_modules" in made.paths
    assert any(request.startswith("/tinytest") for request in registry.requests)
    result = run_tests_in(repository, path)
    assert result.passed, result.output
    assert "ok sum.js" in result.output
    # The registry is gone: a second run's worktree gets node_modules from the kept one.
    second, _ = worktree(repository, tmp_path, "two")
    again = ready(repository, second, base)
    assert not again.prepared_now
    assert run_tests_in(repository, second).passed
    # npm wrote a lockfile: it is what setup produced, kept, never the run's change.
    assert "package-lock.json" in again.paths


@needs_bwrap
def test_setup_sees_the_repositorys_history_read_only_as_setuptools_scm_needs(
    project, tmp_path, environments_root
) -> None:
    root = committed_repository(tmp_path / "repos" / "scm", {"a.txt": "a\n"})
    git(root, "tag", "v1.2.3")
    repository = repository_link(project=project, path=str(root))
    repository.setup_script = "git describe --tags > version.txt\ngit commit --allow-empty -m sneaky || echo refused"
    repository.save()
    path, base = worktree(repository, tmp_path, "one")
    log: list[str] = []

    ready(repository, path, base, log)

    assert (path / "version.txt").read_text() == "v1.2.3\n"
    assert "refused" in "".join(log), "the history is read-only to setup"
    assert git(root, "rev-parse", "HEAD") == base
