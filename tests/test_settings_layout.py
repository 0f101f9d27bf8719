"""The settings stay readable: small modules put together in one place, and one beat
schedule that lists every periodic job."""

from __future__ import annotations

import ast
from pathlib import Path

from django.conf import settings

SETTINGS_DIR = Path(settings.BASE_DIR) / "config" / "settings"
MAX_LINES = 400


def settings_modules() -> list[Path]:
    return sorted(SETTINGS_DIR.rglob("*.py"))


def test_no_settings_module_grows_past_the_limit() -> None:
    too_long = {
        str(path.relative_to(SETTINGS_DIR)): lines
        for path in settings_modules()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not too_long, f"split these into config/settings/components/: {too_long}"


def test_the_beat_schedule_is_one_dict_written_in_one_place() -> None:
    assignments = []
    for path in settings_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    named = target.value if isinstance(target, ast.Subscript) else target
                    if isinstance(named, ast.Name) and named.id == "CELERY_BEAT_SCHEDULE":
                        assignments.append((path.relative_to(SETTINGS_DIR), node))
    assert len(assignments) == 1, [f"{path}:{node.lineno}" for path, node in assignments]
    [(_, assignment)] = assignments
    assert isinstance(assignment, ast.Assign) and isinstance(assignment.value, ast.Dict)


def test_every_scheduled_job_is_a_registered_task() -> None:
    from config.celery import app

    app.loader.import_default_modules()
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert scheduled <= set(app.tasks), scheduled - set(app.tasks)
