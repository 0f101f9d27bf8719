"""memory.markers: every marker found, stripped from the text shown, placeholders never kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.markers import MARKER, PLACEHOLDERS, agent_memory_value, parse_agent_memories, parse_markers

# Marker values: no brackets (they end a marker), single-spaced, not a placeholder.
WORDS = st.text(
    alphabet=st.characters(blacklist_characters="[]|\r\n\t ", blacklist_categories=("Cs", "Zs", "Cc")),
    min_size=1,
    max_size=12,
)
ALL_PLACEHOLDERS = set().union(*PLACEHOLDERS.values())
VALUES = (
    st.lists(WORDS, min_size=1, max_size=5)
    .map(" ".join)
    .filter(lambda value: value.lower() not in ALL_PLACEHOLDERS and "deadline:" not in value.lower())
)
# Surrounding text: anything without brackets.
SURROUNDING = st.text(alphabet=st.characters(blacklist_characters="[]", blacklist_categories=("Cs",)), max_size=40)

MARKERS = st.one_of(
    VALUES.map(lambda value: ("remember", value, f"[REMEMBER: {value}]")),
    VALUES.map(lambda value: ("goal", (value, ""), f"[GOAL: {value}]")),
    st.tuples(VALUES, VALUES).map(lambda pair: ("goal", pair, f"[GOAL: {pair[0]} | DEADLINE: {pair[1]}]")),
    VALUES.map(lambda value: ("done", value, f"[DONE: {value}]")),
)


@given(markers=st.lists(MARKERS, max_size=6), gaps=st.lists(SURROUNDING, min_size=7, max_size=7))
def test_every_marker_is_recovered_and_none_is_shown(markers, gaps) -> None:
    text = gaps[0] + "".join(marker + gap for (_, _, marker), gap in zip(markers, gaps[1:], strict=False))
    parsed = parse_markers(text)
    assert parsed.remember == [value for kind, value, _ in markers if kind == "remember"]
    assert parsed.goals == [value for kind, value, _ in markers if kind == "goal"]
    assert parsed.done == [value for kind, value, _ in markers if kind == "done"]
    assert not MARKER.search(parsed.text)
    assert "[" not in parsed.text


@given(text=SURROUNDING)
def test_text_without_markers_is_left_alone(text: str) -> None:
    parsed = parse_markers(text)
    assert parsed.text == text
    assert parsed.empty


@given(value=st.sampled_from(sorted(PLACEHOLDERS["REMEMBER"] - {""})), before=SURROUNDING)
def test_placeholder_facts_are_never_kept(value: str, before: str) -> None:
    assert parse_markers(f"{before}[REMEMBER: {value.upper()}]").remember == []


@pytest.mark.parametrize(
    "text",
    [
        "[REMEMBER: fact to remember]",
        "[REMEMBER: fact]",
        "[GOAL: goal text | DEADLINE: optional date]",
        "[GOAL: goal text]",
        "[GOAL: text | DEADLINE: when]",
        "[DONE: search text]",
        "[REMEMBER: …]",
        "[GOAL: … | DEADLINE: …]",
    ],
)
def test_instruction_examples_are_not_stored(text: str) -> None:
    parsed = parse_markers(f"Use {text} to remember.")
    assert parsed.empty
    assert parsed.text == "Use to remember."


@pytest.mark.parametrize(
    "text", ["[REMEMBER: ]", "[REMEMBER:]", "[GOAL:   ]", "[GOAL: | DEADLINE: Friday]", "[DONE:  \n ]"]
)
def test_empty_values_are_dropped(text: str) -> None:
    parsed = parse_markers(f"ok {text}")
    assert parsed.empty
    assert parsed.text == "ok"


def test_placeholder_deadline_is_dropped_but_goal_kept() -> None:
    assert parse_markers("[GOAL: Ship v2 | DEADLINE: optional date]").goals == [("Ship v2", "")]


def test_a_real_goal_named_like_a_fact_placeholder_is_kept() -> None:
    assert parse_markers("[GOAL: fact]").goals == [("fact", "")]


def test_multiple_occurrences_of_each_kind_in_order() -> None:
    parsed = parse_markers(
        "Noted. [REMEMBER: likes tea] [remember: works in Berlin]\n"
        "[GOAL: Ship v2 | DEADLINE: Friday] and [Goal: Write docs]\n"
        "[DONE: v1] [DONE: old]"
    )
    assert parsed.remember == ["likes tea", "works in Berlin"]
    assert parsed.goals == [("Ship v2", "Friday"), ("Write docs", "")]
    assert parsed.done == ["v1", "old"]
    assert parsed.text == "Noted.\nand"


def test_values_are_single_spaced() -> None:
    parsed = parse_markers("[REMEMBER:   likes\n  green   tea ]")
    assert parsed.remember == ["likes green tea"]
    assert parsed.text == ""


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Sure. [REMEMBER: x] Next.", "Sure. Next."),
        ("[REMEMBER: x] Next.", "Next."),
        ("Done[REMEMBER: x].", "Done."),
        ("Line one [REMEMBER: x]\nLine two", "Line one\nLine two"),
        ("Para one.\n\n[GOAL: y]\n\nPara two.", "Para one.\n\nPara two."),
        ("Intro\n[REMEMBER: x]\nOutro", "Intro\nOutro"),
        ("Code:\n    x  =  1\n\n\n    y = 2 [REMEMBER: x]", "Code:\n    x  =  1\n\n\n    y = 2"),
        ("Windows\r\n[REMEMBER: x]\r\nend", "Windows\r\nend"),
    ],
)
def test_shown_text_is_tidy_where_markers_were_and_untouched_elsewhere(text: str, shown: str) -> None:
    assert parse_markers(text).text == shown


def test_unclosed_or_unknown_markers_are_left_in_the_text() -> None:
    text = "See [NOTE: x] and [REMEMBER: unclosed"
    parsed = parse_markers(text)
    assert parsed.empty
    assert parsed.text == text


# The agents' [MEMORY: …] markers


def test_agent_memories_are_found_and_stripped() -> None:
    text = (
        "The fix is in place. [MEMORY: Run  the migrations\n before the tests.]\n"
        "[memory: Use UTC everywhere.] [MEMORY: …]\n"
        "    indented code stays\n"
        "Done [MEMORY: lesson] [REMEMBER: tea] here."
    )
    clean, memories = parse_agent_memories(text)
    assert memories == ["Run the migrations before the tests.", "Use UTC everywhere."]
    assert clean == "The fix is in place.\n    indented code stays\nDone [REMEMBER: tea] here."


@pytest.mark.parametrize(
    "text",
    [
        "No markers at all.",
        "[MEMORY:]",
        "[MEMORY:   ]",
        "[MEMORY: what to remember]",
        "[MEMORY: ...]",
        "[MEMORY: Lesson]",
        "[MEMORY: the lesson]",
    ],
)
def test_agent_memories_drop_empty_and_placeholder_values(text: str) -> None:
    clean, memories = parse_agent_memories(text)
    assert memories == []
    assert clean == ("No markers at all." if text == "No markers at all." else "")


def test_agent_memories_keep_one_of_each_and_leave_chat_markers_alone() -> None:
    clean, memories = parse_agent_memories("a [MEMORY: x y] b [MEMORY: x  y] c [GOAL: ship]")
    assert (clean, memories) == ("a b c [GOAL: ship]", ["x y"])
    # Chat's parser knows nothing of [MEMORY: …].
    parsed = parse_markers("Noted [MEMORY: x]")
    assert parsed.empty and parsed.text == "Noted [MEMORY: x]"


def test_an_agent_memory_value_given_outside_a_marker_follows_the_same_rules() -> None:
    # The Coder's remember tool gives its lesson as a tool input, not a marker.
    assert agent_memory_value("  Use  pathlib,\n not os.path. ") == "Use pathlib, not os.path."
    assert agent_memory_value("The lesson") == ""
    assert agent_memory_value(" \n ") == ""
    assert agent_memory_value("a [bracketed] value") == "a [bracketed] value"


@given(values=st.lists(VALUES, max_size=5), gaps=st.lists(SURROUNDING, min_size=6, max_size=6))
def test_every_agent_memory_is_recovered(values: list[str], gaps: list[str]) -> None:
    text = gaps[0] + "".join(f"[MEMORY: {value}]" + gap for value, gap in zip(values, gaps[1:], strict=False))
    clean, memories = parse_agent_memories(text)
    assert memories == list(dict.fromkeys(values))
    assert "[MEMORY" not in clean
