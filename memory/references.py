"""A note's reference to a memory: ``[memory:<id>]``.

Agent notes refer to memories instead of copying their text (an approved run's note
names the lessons it taught this way). The text is read wherever the note is used — a
prompt, the notes page, an export — so a memory edited or deleted on the Memory page is
edited or gone in every note at its next use. Pure functions; resolving a reference to
a memory is memory.selectors.notes.
"""

from __future__ import annotations

import re

# At most 19 digits: a larger number is no id the database can hold (core.converters).
MEMORY_REFERENCE = re.compile(r"\[memory:(\d{1,19})\]")


def memory_reference(memory_id: int) -> str:
    return f"[memory:{memory_id}]"


def referenced_memory_ids(text: str) -> set[int]:
    return {int(found) for found in MEMORY_REFERENCE.findall(text)}
