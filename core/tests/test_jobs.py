"""Services queue their app's Celery tasks by name; tasks.py modules import what they run
inside the task (core/jobs.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from celery.exceptions import NotRegistered
from django.apps import apps
from django.db import transaction

from core import jobs

ROOT = Path(__file__).resolve().parents[2]


def _project_apps() -> list[Path]:
    return [Path(config.path) for config in apps.get_app_configs() if Path(config.path).parent == ROOT]


def test_a_name_gives_the_task_its_module_defines() -> None:
    from pipelines.tasks import pipeline_advance

    assert jobs.job("pipelines.tasks.pipeline_advance") is pipeline_advance._get_current_object()


def test_an_unknown_name_fails_loudly() -> None:
    with pytest.raises(NotRegistered):
        jobs.job("pipelines.tasks.no_such_task")


def test_enqueue_on_commit_waits_for_the_commit(monkeypatch: pytest.MonkeyPatch, transactional_db: None) -> None:
    sent: list[tuple[int, ...]] = []
    monkeypatch.setattr("repos.tasks.repository_clone_run.delay", lambda *args: sent.append(args))
    with transaction.atomic():
        jobs.enqueue_on_commit("repos.tasks.repository_clone_run", 7)
        assert sent == []
    assert sent == [(7,)]


def test_enqueue_with_a_countdown(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[tuple[int, ...], dict[str, float]]] = []
    monkeypatch.setattr(
        "pipelines.tasks.pipeline_advance.apply_async", lambda args, **options: sent.append((args, options))
    )
    jobs.enqueue("pipelines.tasks.pipeline_advance", 3, countdown=2)
    assert sent == [((3,), {"countdown": 2})]


def test_every_task_name_a_service_queues_is_registered() -> None:
    names = set()
    for app_path in _project_apps():
        for path in app_path.rglob("*.py"):
            if "tests" in path.relative_to(app_path).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", getattr(node.func, "attr", None))
                    in {"job", "enqueue", "enqueue_on_commit"}
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                ):
                    names.add(node.args[0].value)
    assert "pipelines.tasks.pipeline_advance" in names
    for name in names:
        assert jobs.job(name).name == name


def _imported_modules(tree: ast.Module) -> list[str]:
    """Every module (or name) an import statement anywhere in ``tree`` names."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            found.append(base)
            found += [f"{base}{'' if base.endswith('.') else '.'}{alias.name}" for alias in node.names]
    return found


def _is_task_module(name: str) -> bool:
    # "pipelines.tasks", ".tasks"; not the tasks app itself ("tasks", "tasks.models").
    return name.rsplit(".", 1)[-1] == "tasks" and name != "tasks"


def test_task_modules_import_what_they_run_inside_the_task_and_nobody_imports_them() -> None:
    """The convention that keeps services → tasks → services from being an import cycle."""
    checked = 0
    for app_path in _project_apps():
        for path in app_path.rglob("*.py"):
            relative = path.relative_to(app_path)
            if "tests" in relative.parts or "migrations" in relative.parts:
                continue
            tree = ast.parse(path.read_text())
            if relative == Path("tasks.py"):
                checked += 1
                module_level = ast.Module(
                    body=[node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)], type_ignores=[]
                )
                for module in _imported_modules(module_level):
                    assert module.split(".")[0] in {"__future__", "celery"}, f"{path}: module-level import of {module}"
            else:
                tasks_imports = [name for name in _imported_modules(tree) if _is_task_module(name)]
                assert not tasks_imports, f"{path} imports {tasks_imports}: queue the task by name (core/jobs.py)"
    assert checked >= 5
