"""What the demo Coder reads in a request: the prompt's sections (the task, the person's
requested changes and line comments, the branch's changes), the tools' results (a file
viewed, a search), and what a person's words ask for (a rename). Used by llm/demo/coder.py.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from llm.demo.request import ToolReply

EDITOR_TOOL_NAME = "str_replace_based_edit_tool"
START_SUBTASK_TOOL_NAME = "start_subtask"
RUN_TESTS_TOOL_NAME = "run_tests"
SEARCH_TOOL_NAME = "search_code"

# The prompt's sections (pipelines/agents/prompts.py coder_editing_prompt).
TASK_SECTION = re.compile(r"^# Task\nTitle: (?P<title>[^\n]*)\n\n(?P<description>.*?)\n\n# Plan\n", re.DOTALL)
# "… by the person reviewing", or by the pull request's checks, a review on the forge, the
# base branch (pipelines.models.FeedbackOrigin's labels).
FEEDBACK_HEADING = re.compile(r"^# Changes requested by (?P<who>[^\n]+)\n", re.MULTILINE)
CHECKS_ASKED = "the pull request's checks"
BASE_ASKED = "the base branch, which moved"
# The files a moved base conflicted in (pipelines/runs/base_update.py base_conflict_feedback).
CONFLICTED_FILE = re.compile(r"^## (?P<path>[^\n]+)\n(?:###|\(changed on one side)", re.MULTILINE)
# One conflict as git writes it with diff3: ours, where both started, theirs.
CONFLICT_BLOCK = re.compile(
    r"^<<<<<<<[^\n]*\n(?P<ours>.*?)^\|\|\|\|\|\|\|[^\n]*\n(?P<base>.*?)^=======\n(?P<theirs>.*?)^>>>>>>>[^\n]*\n",
    re.DOTALL | re.MULTILINE,
)
LINE_COMMENTS_HEADING = "# Comments on lines of your changes"
BRANCH_DIFF_HEADING = "# Already changed on your branch (committed; the files hold it)\n"
CLOSING = "\n\nMake the changes in the repository"
LINE_COMMENT = re.compile(
    r"^## (?P<path>[^\n]+?), lines? (?P<start>\d+)(?:–(?P<end>\d+))?(?: \(comment (?P<id>\d+)\))?\n"
    r"(?P<fence>`{3,})\n(?P<quote>.*?)\n(?P=fence)\n"
    r"Comment: (?P<body>.*?)(?=\n\n## |" + re.escape(CLOSING) + r"|\Z)",
    re.DOTALL | re.MULTILINE,
)
# "Nothing to change" tasks: a question, or work said to be done already.
QUESTION_OPENERS = re.compile(r"^\s*(why|what|how|where|which|who|when)\b", re.IGNORECASE)
NOTHING_TO_DO = re.compile(
    r"\b(already done|already fixed|nothing to change|no changes? (needed|required)|no code changes?)\b", re.IGNORECASE
)

IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
RENAMES = (
    re.compile(rf"\brename\s+`?(?P<old>{IDENTIFIER})`?\s+(?:to|as|into)\s+`?(?P<new>{IDENTIFIER})`?", re.IGNORECASE),
    re.compile(rf"`?(?P<old>{IDENTIFIER})`?\s*(?:->|→|=>)\s*`?(?P<new>{IDENTIFIER})`?"),
)
# "Call it X", "name this constant X": X replaces the name the commented line defines.
NAME_IT = re.compile(
    rf"\b(?:call|name)\s+(?:it|this|that)(?:\s+(?:function|constant|variable|method|class|field|one))?"
    rf"\s+(?P<backtick>`?)(?P<new>{IDENTIFIER})(?P=backtick)",
    re.IGNORECASE,
)
DEFINED_NAME = re.compile(
    rf"^\s*(?:async\s+def|def|class)\s+(?P<def>{IDENTIFIER})|^\s*(?P<var>{IDENTIFIER})\s*(?::[^=]*)?=(?!=)"
)
COMMENT_STYLES = {
    ".py": ("# ", ""), ".sh": ("# ", ""), ".toml": ("# ", ""), ".yml": ("# ", ""), ".yaml": ("# ", ""),
    ".cfg": ("# ", ""), ".rb": ("# ", ""), ".md": ("<!-- ", " -->"), ".html": ("<!-- ", " -->"),
    ".css": ("/* ", " */"),
}  # fmt: skip
DEFAULT_COMMENT_STYLE = ("// ", "")
MAX_RENAMED_LINES = 25  # all of them or none: half a rename breaks the code
MAX_RENAMED_FILES = 5
MAX_VIEW_ROUNDS = 5
VIEW_LINE = re.compile(r"^ *(\d+)\t(.*)$")
SEARCH_LINE = re.compile(r"^(?P<path>[^\n:]+):(?P<line>\d+): (?P<text>.*)$")


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool = False


@dataclass(frozen=True)
class LineComment:
    path: str
    start: int
    end: int
    quote: str
    body: str


Script = Generator[ToolReply, ToolResult, str]


def result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def prompt_section(prompt: str, heading: str | re.Pattern[str], ends: Sequence[str]) -> str:
    if isinstance(heading, re.Pattern):
        found = heading.search(prompt)
        start = found.end() if found else -1
    else:
        start = prompt.find(heading)
        start = start + len(heading) if start >= 0 else -1
    if start < 0:
        return ""
    stops = [index for index in (prompt.find(end, start) for end in ends) if index >= 0]
    return prompt[start : min(stops, default=len(prompt))].strip()


def conflict_resolution(ours: str, base: str, theirs: str) -> tuple[str, str]:
    """How the demo Coder resolves one conflict, and why: a side that left the lines as
    they started loses to the side that changed them; both changed them, this branch's
    change stays (the task it was asked for) — said in the summary."""
    if ours == base:
        return theirs, "only the base changed these lines: took the base's"
    if theirs in (base, ours):
        return ours, "only this branch changed these lines: kept them"
    return ours, "both changed these lines: kept this branch's change, the task's fix"


def one_line(text: str) -> str:
    return " ".join(text.split())


def numbered_lines(view: str) -> list[str]:
    return [match.group(2) for match in map(VIEW_LINE.match, view.splitlines()) if match]


def rename_asked(said: str, quote: str = "") -> tuple[str, str] | None:
    """``(old, new)`` when ``said`` asks for a rename: "rename a to b", "a → b", or "call
    it b" about a line (``quote``) that defines ``a``."""
    for pattern in RENAMES:
        match = pattern.search(said)
        if match and match.group("old") != match.group("new"):
            return match.group("old"), match.group("new")
    match = NAME_IT.search(said)
    defined = DEFINED_NAME.match(quote.split("\n", 1)[0]) if quote else None
    if match and defined:
        new = match.group("new")
        looks_like_a_name = bool(match.group("backtick")) or bool(re.search(r"[_\d]|[a-z][A-Z]|^[A-Z]{2,}", new))
        old = defined.group("def") or defined.group("var")
        if looks_like_a_name and old != new:
            return old, new
    return None


def renamed_note(rename: tuple[str, str], count: int, why: str) -> str:
    old, new = rename
    if not count:
        return f"left `{old}` as it is: it is not used, or renaming it to `{new}` needs too many edits for a demo"
    return f"renamed `{old}` to `{new}` ({count} line{'' if count == 1 else 's'}), {why}"


def feature_paths(number: int) -> tuple[str, str]:
    name = "feature" if number == 1 else f"feature_{number}"
    return f"src/{name}.py", f"tests/test_{name}.py"


def unique_context(lines: list[str], index: int, replacement: str) -> tuple[str, str]:
    """``lines[index]`` with the fewest neighbouring lines that make it match once in the
    file, and the same lines with ``replacement`` in its place."""
    text = "\n".join(lines)
    for around in range(4):
        first, last = max(0, index - around), min(len(lines), index + around + 1)
        old = "\n".join(lines[first:last])
        if text.count(old) == 1 or around == 3:
            new = "\n".join([*lines[first:index], replacement, *lines[index + 1 : last]])
            return old, new
    raise AssertionError("unreachable")
