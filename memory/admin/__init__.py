"""Admin for agent memory, one module per area."""

from . import context, facts, notes, semantic  # noqa: F401 - registers the admins
