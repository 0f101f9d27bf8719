"""The one way an app looks up a row by an id taken from a request."""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Model, QuerySet

from .converters import parse_id
from .exceptions import NotFound

M = TypeVar("M", bound=Model)


def one_or_not_found(
    queryset: QuerySet[M], object_id: object, message: str, *, field: str = "pk", error: type[NotFound] = NotFound
) -> M:
    """The row of ``queryset`` whose ``field`` is ``object_id``, or ``error(message)``.

    ``queryset`` is already limited to what the user may see, so a malformed id, a
    missing row and someone else's row are the same answer (core.converters.parse_id
    keeps ids the database cannot hold out of the query).
    """
    pk = parse_id(object_id)
    found = queryset.filter(**{field: pk}).first() if pk is not None else None
    if found is None:
        raise error(message)
    return found
