"""Memory.embedding becomes a column the database searches: pgvector's vector(384) on
PostgreSQL (the extension is created here), still a float32 BLOB on SQLite.

PostgreSQL has no cast from bytea to vector, so the rows are converted in Python, a
thousand at a time, into a new column that then takes the old one's place. A stored
vector of the wrong size (never searchable) becomes a zero vector with no model named,
so it stays out of search.
"""

from django.contrib.postgres.operations import CreateExtension
from django.db import DatabaseError, migrations

import memory.models.fields

DIMENSIONS = 384
CHUNK = 1000


class CreatePgvectorExtension(CreateExtension):
    """CREATE EXTENSION vector, with an error that says what the server lacks."""

    def __init__(self) -> None:
        super().__init__("vector")

    def database_forwards(self, app_label, schema_editor, from_state, to_state):  # type: ignore[no-untyped-def]
        try:
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        except DatabaseError as error:
            raise DatabaseError(
                "PostgreSQL needs the pgvector extension for AutoCoder's memory search "
                "(README, 'Production'): install it on the server (docker-compose.yml's "
                "pgvector/pgvector image has it) and run `manage.py migrate` as a role that "
                f"may CREATE EXTENSION. The server said: {error}"
            ) from error

    def database_backwards(self, app_label, schema_editor, from_state, to_state):  # type: ignore[no-untyped-def]
        # Django's checks the vendor going forwards only.
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


def _convert(schema_editor, *, to_vector: bool) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from memory.models.fields import vector_from_text, vector_text

    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite keeps the same BLOB
    new_type = f"vector({DIMENSIONS})" if to_vector else "bytea"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE memory_memory ADD COLUMN embedding_converted {new_type}")
        last_id = 0
        while True:
            cursor.execute(
                "SELECT id, embedding, embedding_model FROM memory_memory WHERE id > %s ORDER BY id LIMIT %s",
                [last_id, CHUNK],
            )
            rows = cursor.fetchall()
            if not rows:
                break
            updates = []
            for pk, stored, model in rows:
                if to_vector:
                    vector = np.frombuffer(bytes(stored), dtype="<f4")
                    if vector.shape[0] != DIMENSIONS:
                        vector, model = np.zeros(DIMENSIONS, dtype=np.float32), ""
                    updates.append((vector_text(vector), model, pk))
                else:
                    updates.append((vector_from_text(stored).astype("<f4").tobytes(), model, pk))
            cast = "::vector" if to_vector else ""
            cursor.executemany(
                f"UPDATE memory_memory SET embedding_converted = %s{cast}, embedding_model = %s WHERE id = %s",
                updates,
            )
            last_id = rows[-1][0]
        cursor.execute("ALTER TABLE memory_memory DROP COLUMN embedding")
        cursor.execute("ALTER TABLE memory_memory RENAME COLUMN embedding_converted TO embedding")
        cursor.execute("ALTER TABLE memory_memory ALTER COLUMN embedding SET NOT NULL")


def bytes_to_vectors(apps, schema_editor):  # type: ignore[no-untyped-def]
    _convert(schema_editor, to_vector=True)


def vectors_to_bytes(apps, schema_editor):  # type: ignore[no-untyped-def]
    _convert(schema_editor, to_vector=False)


class Migration(migrations.Migration):
    dependencies = [
        ("memory", "0003_memory_source_and_uses"),
    ]

    operations = [
        CreatePgvectorExtension(),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="memory",
                    name="embedding",
                    field=memory.models.fields.EmbeddingField(dimensions=DIMENSIONS),
                ),
            ],
            database_operations=[migrations.RunPython(bytes_to_vectors, vectors_to_bytes)],
        ),
    ]
