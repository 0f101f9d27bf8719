from __future__ import annotations

import pytest

from core.converters import MAX_ID, parse_id


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (7, 7),
        ("7", 7),
        ("007", 7),
        (MAX_ID, MAX_ID),
        (str(MAX_ID), MAX_ID),
        (MAX_ID + 1, None),
        (str(MAX_ID + 1), None),
        ("9" * 5000, None),
        (0, None),
        (-1, None),
        ("-1", None),
        (str(-(2**63) - 1), None),
        (" 7", None),
        ("+7", None),
        ("7_0", None),
        ("٧", None),  # an Arabic-Indic seven: int() takes it
        ("7\x00", None),
        ("1.5", None),
        (1.0, None),
        (True, None),
        (None, None),
        ("", None),
    ],
)
def test_an_id_is_a_positive_integer_a_64_bit_key_holds(value: object, expected: int | None) -> None:
    assert parse_id(value) == expected
