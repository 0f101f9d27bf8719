"""A column for embeddings that the database itself can search.

On PostgreSQL it is pgvector's ``vector(n)``, so similarity is computed in the query
(memory.vector_store); on SQLite a float32 little-endian BLOB, read by numpy. In Python
it is a float32 numpy array either way; a write also takes a sequence of floats or the
float32 bytes.

Not the ``pgvector`` package's VectorField: that field stores text on SQLite, and the
rest of it (type registration, distance functions) is a few lines here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from django.core import checks, exceptions
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

FLOAT32_LE = np.dtype("<f4")


def vector_text(vector: np.ndarray) -> str:
    """pgvector's text form, exact: every float32 written as the shortest decimal that
    reads back as the same float32."""
    return "[" + ",".join(repr(x) for x in np.asarray(vector, dtype=np.float32).tolist()) + "]"


def vector_from_text(text: str) -> np.ndarray:
    return np.array(text.strip("[]").split(","), dtype=np.float32)


class EmbeddingField(models.Field):
    description = "An embedding (pgvector on PostgreSQL, float32 bytes elsewhere)"
    empty_values = [None]

    def __init__(self, *args: Any, dimensions: int, **kwargs: Any) -> None:
        self.dimensions = dimensions
        kwargs.setdefault("editable", False)
        super().__init__(*args, **kwargs)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        errors = super().check(**kwargs)
        if self.dimensions <= 0:
            errors.append(checks.Error("dimensions must be positive.", obj=self, id="memory.E001"))
        return errors

    def deconstruct(self) -> Any:
        name, path, args, kwargs = super().deconstruct()
        kwargs["dimensions"] = self.dimensions
        kwargs.pop("editable", None)
        return name, path, args, kwargs

    def db_type(self, connection: BaseDatabaseWrapper) -> str:
        if connection.vendor == "postgresql":
            return f"vector({self.dimensions})"
        return connection.data_types["BinaryField"]

    def to_vector(self, value: Any) -> np.ndarray | None:
        if value is None:
            return None
        if isinstance(value, bytes | bytearray | memoryview):
            return np.frombuffer(bytes(value), dtype=FLOAT32_LE).astype(np.float32)
        if isinstance(value, str):
            return vector_from_text(value)
        return np.asarray(value, dtype=np.float32).reshape(-1)

    def to_python(self, value: Any) -> np.ndarray | None:
        return self.to_vector(value)

    # Field's own checks compare the value with `in`, which an array cannot answer.
    def validate(self, value: Any, model_instance: models.Model | None) -> None:
        if value is None:
            if not self.null:
                raise exceptions.ValidationError(self.error_messages["null"], code="null")
            return
        if len(value) != self.dimensions:
            raise exceptions.ValidationError(
                f"An embedding has {self.dimensions} dimensions, not {len(value)}.", code="dimensions"
            )

    def run_validators(self, value: Any) -> None:
        if value is not None:
            for validator in self.validators:
                validator(value)

    def get_db_prep_value(self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False) -> Any:
        vector = self.to_vector(value)
        if vector is None:
            return None
        if vector.shape[0] != self.dimensions:
            raise ValueError(f"Expected an embedding of {self.dimensions} dimensions, got {vector.shape[0]}.")
        if connection.vendor == "postgresql":
            return vector_text(vector)
        return vector.astype(FLOAT32_LE).tobytes()

    def from_db_value(self, value: Any, expression: Any, connection: BaseDatabaseWrapper) -> np.ndarray | None:
        return self.to_vector(value)

    def value_to_string(self, obj: models.Model) -> str:
        vector = self.value_from_object(obj)
        return "" if vector is None else vector_text(vector)
