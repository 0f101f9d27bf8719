"""Migrating the test database to a state and back, for tests of data migrations."""

from __future__ import annotations

from django.apps.registry import Apps
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader


def migrate(targets: list[tuple[str, str]]) -> Apps:
    """Migrate to ``targets`` (forwards or backwards); the models as the database has
    them then — the apps not named too, which stay at their last migration."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    loader = MigrationLoader(connection)
    return loader.project_state(list(loader.applied_migrations)).apps


def migrate_to_latest() -> None:
    """Every app to its last migration again: a test that went back leaves the schema as
    the other tests expect it."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
