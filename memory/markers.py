"""Memory markers in agent and assistant replies.

``[REMEMBER: fact]``, ``[GOAL: text]``, ``[GOAL: text | DEADLINE: when]`` and
``[DONE: search text]``: every occurrence is found, removed from the text shown and
returned. Empty values and the placeholder examples from our own instructions are
dropped. Pure functions; applying them is memory.services.facts.markers_apply.

``[MEMORY: lesson]`` is the agents' marker (a pipeline run's Planner, Coder, Reviewer):
``parse_agent_memories`` finds those alone, by the same rules, for semantic memories.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MARKER = re.compile(r"\[\s*(REMEMBER|GOAL|DONE)\s*:([^\[\]]*)\]", re.IGNORECASE)
# One or more markers in a row with the spaces around them: removed as one piece, so
# that "a [REMEMBER: x] [GOAL: y] b" is shown as "a b".
MARKER_RUN = re.compile(rf"[ \t]*(?:{MARKER.pattern}[ \t]*)+", re.IGNORECASE)
DEADLINE = re.compile(r"\|\s*DEADLINE\s*:", re.IGNORECASE)
AGENT_MEMORY = re.compile(r"\[\s*(MEMORY)\s*:([^\[\]]*)\]", re.IGNORECASE)
AGENT_MEMORY_RUN = re.compile(rf"[ \t]*(?:{AGENT_MEMORY.pattern}[ \t]*)+", re.IGNORECASE)

# The examples our system prompts and docs use to teach the markers, per value: never
# stored. Per kind, so that a real goal called "goal" is not mistaken for one.
ELLIPSES = {"…", "...", ""}
PLACEHOLDERS: dict[str, set[str]] = {
    "REMEMBER": {"fact", "fact to remember", *ELLIPSES},
    "GOAL": {"text", "goal", "goal text", *ELLIPSES},
    "DEADLINE": {"when", "optional date", "date", "deadline", *ELLIPSES},
    "DONE": {"search text", "text", *ELLIPSES},
    "MEMORY": {"lesson", "the lesson", "memory", "text", "what to remember", "lesson learned", *ELLIPSES},
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


def _is_placeholder(kind: str, value: str) -> bool:
    return value.lower() in PLACEHOLDERS[kind]


def _strip_markers(text: str, runs: re.Pattern[str] = MARKER_RUN) -> str:
    """The text without its markers, leaving no doubled spaces or marker-only lines.

    Only the places where markers were touch the text: indentation and blank lines
    elsewhere (code in a reply) stay as they are.
    """
    pieces: list[str] = []
    cursor = 0
    for match in runs.finditer(text):
        start, end = match.start(), match.end()
        at_line_start = start == 0 or text[start - 1] == "\n"
        at_line_end = end == len(text) or text[end] in "\r\n"
        if at_line_start and at_line_end:
            # The line held only markers: drop it with its line break, and when it sat
            # between two blank lines, drop one of those too.
            if text.startswith("\r\n", end):
                end += 2
            elif end < len(text):
                end += 1
            if pieces or start > cursor:
                before = "".join(pieces) + text[cursor:start]
                if before.endswith("\n\n") and text.startswith(("\n", "\r\n"), end):
                    end += 2 if text.startswith("\r\n", end) else 1
            replacement = ""
        elif at_line_start:
            replacement = re.match(r"[ \t]*", match.group()).group()  # type: ignore[union-attr]  # keep the indent
        elif at_line_end:
            replacement = ""
        else:
            had_space = match.group()[:1] in " \t" or match.group()[-1:] in " \t"
            replacement = " " if had_space else ""
        pieces.append(text[cursor:start])
        pieces.append(replacement)
        cursor = end
    pieces.append(text[cursor:])
    # Blank lines a marker left at either end go; the first line keeps its indent.
    return re.sub(r"\A(?:[ \t]*\r?\n)+", "", "".join(pieces)).rstrip()


def parse_markers(text: str) -> ParsedReply:
    if not MARKER.search(text):
        return ParsedReply(text=text)
    parsed = ParsedReply(text=_strip_markers(text))
    for match in MARKER.finditer(text):
        kind, body = match.group(1).upper(), match.group(2)
        if kind == "GOAL":
            goal_text, deadline = [*DEADLINE.split(body, maxsplit=1), ""][:2]
            goal_text, deadline = _clean(goal_text), _clean(deadline)
            if goal_text and not _is_placeholder("GOAL", goal_text):
                parsed.goals.append((goal_text, "" if _is_placeholder("DEADLINE", deadline) else deadline))
            continue
        value = _clean(body)
        if not value or _is_placeholder(kind, value):
            continue
        (parsed.remember if kind == "REMEMBER" else parsed.done).append(value)
    return parsed


def parse_agent_memories(text: str) -> tuple[str, list[str]]:
    """(the text without its ``[MEMORY: …]`` markers, their values in order).

    Other markers are left in the text; empty values and placeholders are dropped,
    whitespace inside a value is collapsed, and the same value twice is kept once.
    """
    if not AGENT_MEMORY.search(text):
        return text, []
    memories: list[str] = []
    for match in AGENT_MEMORY.finditer(text):
        value = agent_memory_value(match.group(2))
        if value and value not in memories:
            memories.append(value)
    return _strip_markers(text, AGENT_MEMORY_RUN), memories


def agent_memory_value(text: str) -> str:
    """A lesson an agent gave (a marker's value, or a tool's input) as it is stored:
    whitespace collapsed; empty when there is none or it is a placeholder."""
    value = _clean(text)
    return "" if _is_placeholder("MEMORY", value) else value
