"""Memory markers in agent and assistant replies.

``[REMEMBER: fact]``, ``[GOAL: text]``, ``[GOAL: text | DEADLINE: when]`` and
``[DONE: search text]``: every occurrence is found, removed from the text shown and
returned. Empty values and the placeholder examples from our own instructions are
dropped. Pure functions; applying them is memory.services.facts.markers_apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MARKER = re.compile(r"\[(REMEMBER|GOAL|DONE):([^\[\]]*)\]", re.IGNORECASE)
DEADLINE = re.compile(r"\|\s*DEADLINE:\s*", re.IGNORECASE)

# The examples our system prompts use to teach the markers: never stored.
PLACEHOLDERS = {
    "fact",
    "fact to remember",
    "goal",
    "goal text",
    "text",
    "search text",
    "optional date",
    "when",
}


@dataclass
class ParsedReply:
    text: str
    remember: list[str] = field(default_factory=list)
    goals: list[tuple[str, str]] = field(default_factory=list)
    done: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.remember or self.goals or self.done)


def _clean(value: str) -> str:
    return " ".join(value.split())


def _is_placeholder(value: str) -> bool:
    return value.lower() in PLACEHOLDERS


def parse_markers(text: str) -> ParsedReply:
    parsed = ParsedReply(text="")
    for match in MARKER.finditer(text):
        kind, body = match.group(1).upper(), match.group(2)
        if kind == "GOAL":
            goal_text, deadline = (DEADLINE.split(body, maxsplit=1) + [""])[:2]
            goal_text, deadline = _clean(goal_text), _clean(deadline)
            if goal_text and not _is_placeholder(goal_text):
                parsed.goals.append((goal_text, "" if _is_placeholder(deadline) else deadline))
            continue
        value = _clean(body)
        if not value or _is_placeholder(value):
            continue
        (parsed.remember if kind == "REMEMBER" else parsed.done).append(value)
    stripped = MARKER.sub("", text)
    # Markers removed from a line leave doubled spaces and blank lines behind.
    stripped = re.sub(r"[ \t]{2,}", " ", stripped)
    stripped = re.sub(r"\n{3,}", "\n\n", stripped)
    parsed.text = stripped.strip()
    return parsed
