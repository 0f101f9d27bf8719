"""Typed payloads: frozen dataclasses that check their values' types when built.

A dataclass already refuses an unknown keyword; ``Payload`` also refuses a value whose
type is not the annotated one (``bool`` is not accepted for ``int``, as JSON tells them
apart), so a live event cannot be sent with a shape its readers do not expect.
"""

from __future__ import annotations

import types
import typing
from dataclasses import asdict, dataclass, fields
from typing import Any


class PayloadTypeError(TypeError):
    pass


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    known = _FIELD_TYPES.get(cls)
    if known is None:
        hints = typing.get_type_hints(cls)
        known = _FIELD_TYPES[cls] = {field.name: hints[field.name] for field in fields(cls)}
    return known


def _matches(value: object, expected: Any) -> bool:
    if expected is Any:
        return True
    if expected is None or expected is type(None):
        return value is None
    origin = typing.get_origin(expected)
    if origin in (types.UnionType, typing.Union):
        return any(_matches(value, option) for option in typing.get_args(expected))
    if origin is typing.Literal:
        return value in typing.get_args(expected)
    if origin in (list, tuple):
        (item,) = typing.get_args(expected)[:1] or (Any,)
        return isinstance(value, origin) and all(_matches(element, item) for element in value)
    if origin is dict:
        key, item = typing.get_args(expected) or (Any, Any)
        return isinstance(value, dict) and all(_matches(k, key) and _matches(v, item) for k, v in value.items())
    if expected in (int, float) and isinstance(value, bool):
        return False
    if expected is float:
        return isinstance(value, int | float)
    return isinstance(value, expected)


@dataclass(frozen=True, kw_only=True)
class Payload:
    """Subclass with ``@dataclass(frozen=True, kw_only=True)``; class-level settings are
    ``ClassVar``s and are not part of the payload."""

    def __post_init__(self) -> None:
        for name, expected in _field_types(type(self)).items():
            value = getattr(self, name)
            if not _matches(value, expected):
                raise PayloadTypeError(
                    f"{type(self).__name__}.{name} must be {expected}, not {type(value).__name__} ({value!r:.80})"
                )

    def as_data(self) -> dict[str, Any]:
        """The JSON object it is sent and stored as."""
        return asdict(self)
