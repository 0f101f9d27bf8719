"""What a key taken from a request may be, for every app: an id is a positive integer a
64-bit primary key can hold; a text key has no NUL character.

The URL converters make anything else a 404 before a view runs; selectors that take an id
from a request body, a query string or an API path (where the view answers 404 in its own
words) check it with ``parse_id``. Without that, an id past 2**63 - 1 reaches the database:
SQLite raises OverflowError on some lookups, which would be a 500.
"""

from __future__ import annotations

from django.urls import register_converter

MAX_ID = 2**63 - 1
MAX_ID_DIGITS = len(str(MAX_ID))


def parse_id(value: object) -> int | None:
    """The id ``value`` names (an int, or its decimal text), or None if it names none:
    not a whole number, not positive, or past what a 64-bit primary key holds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    else:
        text = str(value)
        # Only plain digits: int() would also take " 7", "+7", "7_0" and "٧".
        if not (text.isascii() and text.isdigit()) or len(text) > MAX_ID_DIGITS:
            return None
        number = int(text)
    return number if 0 < number <= MAX_ID else None


class IdConverter:
    """``<id:name>``: ``<int:name>`` within the range of a 64-bit primary key."""

    regex = "[0-9]+"

    def to_python(self, value: str) -> int:
        number = parse_id(value)
        if number is None:
            raise ValueError(value)  # the pattern does not match: a 404
        return number

    def to_url(self, value: int) -> str:
        return str(value)


class KeyConverter:
    """``<key:name>``: ``<str:name>`` without a NUL character, which PostgreSQL text cannot
    hold (a lookup with one fails) and which names nothing. Other odd characters are left
    to the view: an agent id may hold a newline."""

    regex = "[^/\x00]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


def register() -> None:
    register_converter(IdConverter, "id")
    register_converter(KeyConverter, "key")
