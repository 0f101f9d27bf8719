"""Keep a memory's vector in its row on PostgreSQL.

A row longer than about 2 KB is made shorter by TOAST, which moves its largest
compressible column out of line — the 1.5 KB vector, once citations and an "applies
when" line made memory rows that long. Every search then fetched each vector from the
TOAST table: the exact scan of 10,000 memories took 49 ms instead of 22
(bench/bench_memory_retrieval.py). PLAIN storage keeps the vector inline, so TOAST moves
the text and the citations instead. Rows written before keep their layout until they are
written again (an edit, a re-embedding). SQLite has no TOAST: nothing to do there.
"""

from __future__ import annotations

from django.db import migrations


def _storage(schema_editor, storage: str) -> None:  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE memory_memory ALTER COLUMN embedding SET STORAGE {storage}")


def keep_inline(apps, schema_editor):  # type: ignore[no-untyped-def]
    _storage(schema_editor, "PLAIN")


def back_to_default(apps, schema_editor):  # type: ignore[no-untyped-def]
    _storage(schema_editor, "EXTERNAL")


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0008_memory_cited_paths"),
    ]

    operations = [migrations.RunPython(keep_inline, back_to_default)]
