"""The demo model as the Coder: a script of tool calls, replayed from the conversation.

The model keeps no state between requests. Each request replays the Coder's script from
the start, handing each step the result the conversation holds for it; the first step
with no result yet is the answer (a script that has run out answers its summary, in
plain text). So the Coder reacts to what the tools said — what a file holds, whether the
tests failed — exactly as a model reading its conversation would, and a run on a
worktree that earlier runs changed (approved and merged) finds that worktree's state.

What it does, by what the request says:

- the person asked for changes (the prompt's requested changes and line comments): it
  follows them — "rename X to Y" (or "call it Y" on a line that defines something) is a
  rename at every use it finds; any other comment is written as a comment line above the
  lines it was about — then runs the tests;
- the task is a question, or says it is already done: it reads, and changes nothing;
- the demo repository (demo_app.BIG_FILE is there): it pins down the first bug still in
  the big module with a new test, runs the tests (they fail), fixes the one line with
  ``str_replace``, runs them again (they pass); with every bug fixed, it bumps the
  module's version, one line;
- elsewhere: it writes a small feature and its test, in files that do not exist yet.

It names the lessons the team taught (the system prompt's recalled memories) first.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from llm.demo.coder_reading import (
    BASE_ASKED,
    BRANCH_DIFF_HEADING,
    CHECKS_ASKED,
    CLOSING,
    COMMENT_STYLES,
    CONFLICT_BLOCK,
    CONFLICTED_FILE,
    DEFAULT_COMMENT_STYLE,
    EDITOR_TOOL_NAME,
    FEEDBACK_HEADING,
    LINE_COMMENT,
    LINE_COMMENTS_HEADING,
    MAX_RENAMED_FILES,
    MAX_RENAMED_LINES,
    MAX_VIEW_ROUNDS,
    NOTHING_TO_DO,
    QUESTION_OPENERS,
    RUN_TESTS_TOOL_NAME,
    SEARCH_LINE,
    SEARCH_TOOL_NAME,
    START_SUBTASK_TOOL_NAME,
    TASK_SECTION,
    LineComment,
    Script,
    ToolResult,
    conflict_resolution,
    feature_paths,
    numbered_lines,
    one_line,
    prompt_section,
    rename_asked,
    renamed_note,
    result_text,
    unique_context,
)
from llm.demo.demo_app import BIG_FILE, TEST_FILE, bug_still_there, version_bump
from llm.demo.request import MessagesRequest, ToolReply, lessons_taught, plan_orders


def coder_reply(request: MessagesRequest, delay: float) -> ToolReply | str:
    """The Coder's next tool call, or (a string) its summary once it is done."""
    script = DemoCoder(request, delay).script()
    results = [ToolResult(result_text(block), bool(block.get("is_error"))) for block in request.tool_results]
    try:
        step = next(script)
        for result in results:
            step = script.send(result)
    except StopIteration as done:
        return str(done.value)
    return step


@dataclass
class DemoCoder:
    request: MessagesRequest
    delay: float
    # Our tools it may use, where they are not the request's own (the Claude CLI's
    # stand in for them: llm/demo/coder_cli.py).
    available: frozenset[str] | None = None
    prompt: str = ""
    lessons: list[str] = field(default_factory=list)
    _spoken: bool = False

    def __post_init__(self) -> None:
        texts = self.request.message_texts
        self.prompt = texts[0] if texts else ""
        self.lessons = lessons_taught(self.request.system_text)

    # --- what the prompt says

    @property
    def task(self) -> tuple[str, str]:
        match = TASK_SECTION.search(self.prompt)
        return (match.group("title").strip(), match.group("description").strip()) if match else ("", "")

    @property
    def feedback(self) -> str:
        return prompt_section(self.prompt, FEEDBACK_HEADING, ["\n\n" + LINE_COMMENTS_HEADING, CLOSING])

    @property
    def feedback_from(self) -> str:
        found = FEEDBACK_HEADING.search(self.prompt)
        return found.group("who") if found else ""

    @property
    def line_comments(self) -> list[LineComment]:
        block = prompt_section(self.prompt, LINE_COMMENTS_HEADING, [CLOSING])
        return [
            LineComment(
                path=match.group("path"),
                start=int(match.group("start")),
                end=int(match.group("end") or match.group("start")),
                quote=match.group("quote"),
                body=one_line(match.group("body")),
            )
            for match in LINE_COMMENT.finditer(block)
        ]

    @property
    def first_changed_line(self) -> tuple[str, int] | None:
        """The first line the branch's diff added: ``(path, line)`` in the new file."""
        diff = prompt_section(self.prompt, BRANCH_DIFF_HEADING, ["\n\n# ", CLOSING])
        path, line = "", 0
        for text in diff.splitlines():
            if text.startswith("+++ "):
                path = text[6:] if text.startswith("+++ b/") else ""
            elif text.startswith("@@"):
                match = re.search(r"\+(\d+)", text)
                line = int(match.group(1)) if match else 0
            elif path and line:
                if text.startswith("+"):
                    return path, line
                if not text.startswith("-"):
                    line += 1
        return None

    def nothing_to_change(self) -> str | None:
        """Why the task needs no change (a question; done already), or None."""
        title, description = self.task
        if title.rstrip().endswith("?") or QUESTION_OPENERS.match(title):
            return "asks a question"
        if NOTHING_TO_DO.search(f"{title}\n{description}"):
            return "says it is done already"
        return None

    # --- tool calls

    def call(self, name: str, text: str, **tool_input: Any) -> ToolReply:
        if not self._spoken:
            self._spoken = True
            if self.lessons:
                taught = "; ".join(f"“{lesson}”" for lesson in self.lessons)
                text = f"Keeping in mind what the team taught me: {taught}.\n{text}"
        return ToolReply(name=name, text=text, input=tool_input, chunk_delay=self.delay)

    def edit(self, text: str, **tool_input: Any) -> ToolReply:
        return self.call(EDITOR_TOOL_NAME, text, **tool_input)

    def has(self, tool: str) -> bool:
        return tool in (self.available if self.available is not None else self.request.tool_names)

    def read(self, path: str, text: str) -> Generator[ToolReply, ToolResult, str | None]:
        """View ``path`` whole (in parts when the view is cut); its text, or None."""
        result = yield self.edit(text, command="view", path=path)
        if result.is_error:
            return None
        lines = numbered_lines(result.text)
        for _ in range(MAX_VIEW_ROUNDS):
            if "output truncated" not in result.text or not lines:
                break
            result = yield self.edit(f"Reading the rest of {path}.\n", command="view", path=path,
                                     view_range=[len(lines) + 1, -1])  # fmt: skip
            if result.is_error:
                break
            lines += numbered_lines(result.text)
        return "\n".join(lines) + "\n" if lines else ""

    def subtask(self, position: int) -> Generator[ToolReply, ToolResult, None]:
        """Say which subtask of the plan begins (its ``position``-th), when there is one."""
        orders = plan_orders(self.request) if self.has(START_SUBTASK_TOOL_NAME) else []
        if position < len(orders):
            yield self.call(START_SUBTASK_TOOL_NAME, f"Starting subtask {orders[position]}.\n", order=orders[position])

    def run_tests(self, text: str) -> Generator[ToolReply, ToolResult, ToolResult | None]:
        if not self.has(RUN_TESTS_TOOL_NAME):
            return None
        return (yield self.call(RUN_TESTS_TOOL_NAME, text))

    # --- the scripts

    def script(self) -> Script:
        if self.feedback_from == CHECKS_ASKED:
            # The forge's CI failed on the pull request: find the bug it caught, as for a task.
            listing = yield self.edit("The pull request's checks failed: looking for why.\n", command="view", path=".")
            return (yield from self.fix_one_line(set(listing.text.splitlines())))
        if self.feedback_from == BASE_ASKED:
            return (yield from self.resolve_conflicts())
        if self.feedback or self.line_comments:
            return (yield from self.follow_the_review())
        listing = yield self.edit("Looking at the repository before changing it.\n", command="view", path=".")
        files = set(listing.text.splitlines())
        reason = self.nothing_to_change()
        if reason:
            return (yield from self.answer_without_changes(files, reason))
        if BIG_FILE in files:
            return (yield from self.fix_one_line(files))
        return (yield from self.write_a_feature(files))

    def answer_without_changes(self, files: set[str], reason: str) -> Script:
        target = BIG_FILE if BIG_FILE in files else "README.md"
        content = yield from self.read(target, f"Reading {target} to answer from the code.\n")
        read = ""
        if content is not None:
            lines = content.splitlines()
            functions = sum(1 for line in lines if line.lstrip().startswith(("def ", "async def ")))
            classes = sum(1 for line in lines if line.startswith("class "))
            read = f" I read {target} ({len(lines)} lines, {functions} functions, {classes} classes)"
        return (
            f"Nothing to change: the task {reason}.{read} and left every file as it is — "
            "the branch has no changes to review."
        )

    def fix_one_line(self, files: set[str]) -> Script:
        content = yield from self.read(BIG_FILE, f"Reading {BIG_FILE}, the module the change is in.\n")
        if content is None:
            return (yield from self.write_a_feature(files))
        bug = bug_still_there(content)
        if bug is None:
            return (yield from self.bump_version(content, files))
        yield from self.subtask(0)
        tests = yield from self.read(TEST_FILE, f"Reading {TEST_FILE}: a test should show the bug first.\n")
        if tests is not None and bug.test_name not in tests:
            yield self.edit(
                f"Found it: {bug.title}. A test that fails until it is fixed:\n",
                command="insert",
                path=TEST_FILE,
                insert_line=len(tests.splitlines()),
                new_str="\n\n" + bug.test,
            )
        failing = yield from self.run_tests("Running the tests: the new one should fail.\n")
        yield from self.subtask(1)
        said = "It fails, as it should. " if failing is not None and failing.is_error else ""
        yield self.edit(
            f"{said}The fix is one line of {BIG_FILE}.\n",
            command="str_replace",
            path=BIG_FILE,
            old_str=bug.old,
            new_str=bug.new,
        )
        passing = yield from self.run_tests("Running the tests again.\n")
        summary = (
            f"Fixed {BIG_FILE}: {bug.title}. One line changed: `{bug.old.strip()}` → `{bug.new.strip()}`. "
            f"The new test {bug.test_name} ({TEST_FILE}) "
        )
        if passing is not None and passing.is_error:
            return summary + "still fails after the fix: see the test results."
        return summary + "failed before the fix and passes after it."

    def bump_version(self, content: str, files: set[str]) -> Script:
        bump = version_bump(content)
        if bump is None:
            return (yield from self.write_a_feature(files))
        old, new = bump
        yield from self.subtask(0)
        yield self.edit(
            f"Every bug I know of in {BIG_FILE} is fixed already: releasing them as a new version, one line.\n",
            command="str_replace",
            path=BIG_FILE,
            old_str=old,
            new_str=new,
        )
        yield from self.subtask(1)
        yield from self.run_tests("Running the tests.\n")
        return f"Bumped the version in {BIG_FILE}: `{old}` → `{new}` (its known bugs are all fixed)."

    def write_a_feature(self, files: set[str]) -> Script:
        """A new function and its test, in files that do not exist yet."""
        yield self.edit("Reading the README.\n", command="view", path="README.md")
        number = 1
        while {feature_paths(number)[0], feature_paths(number)[1]} & files:
            number += 1
        name = "feature" if number == 1 else f"feature_{number}"
        written = list(
            zip(
                feature_paths(number),
                (
                    f'def {name}() -> str:\n    return "done"\n',
                    f'from src.{name} import {name}\n\n\ndef test_{name}() -> None:\n    assert {name}() == "done"\n',
                ),
                strict=True,
            )
        )
        for position, (path, text) in enumerate(written):
            yield from self.subtask(position)
            yield self.edit(f"Writing {path}.\n", command="create", path=path, file_text=text)
        return f"Added {name}() in {written[0][0]} and a test that pins its result down."

    def resolve_conflicts(self) -> Script:
        """The base moved and conflicted: each conflicted file's markers replaced by one
        side (``conflict_resolution``), then the tests."""
        done: list[str] = []
        for path in dict.fromkeys(CONFLICTED_FILE.findall(self.feedback)):
            content = yield from self.read(path, f"Reading {path}: the base's merge left conflict markers in it.\n")
            blocks = list(CONFLICT_BLOCK.finditer(content or ""))
            for number, block in enumerate(blocks, 1):
                kept, why = conflict_resolution(block["ours"], block["base"], block["theirs"])
                yield self.edit(
                    f"Conflict {number} of {len(blocks)} in {path}: {why}.\n",
                    command="str_replace",
                    path=path,
                    old_str=block.group(0),
                    new_str=kept,
                )
                done.append(f"{path} conflict {number}: {why}")
        yield from self.run_tests("Running the tests on the resolved merge.\n")
        if not done:
            return "The base's merge left no conflict markers that I could find."
        return "Resolved the moved base's conflicts — " + "; ".join(done) + "."

    def follow_the_review(self) -> Script:
        """Do what the person asked: each line comment, then the general feedback."""
        done: list[str] = []
        renamed: set[tuple[str, str]] = set()
        for comment in self.line_comments:
            rename = rename_asked(comment.body, comment.quote)
            where = f"{comment.path}, line {comment.start}"
            if rename:
                count = yield from self.rename(*rename, f"The comment on {where} asks for a rename.")
                renamed.add(rename)
                done.append(renamed_note(rename, count, f"as asked on {where}"))
            else:
                line = yield from self.note(comment.path, comment.start, comment.quote, comment.body)
                done.append(
                    f"wrote the comment on {where} into the code"
                    + (f" (line {line})" if line else " (the file could not be read)")
                )
        feedback = one_line(self.feedback)
        rename = rename_asked(feedback) if feedback else None
        if rename and rename not in renamed:
            count = yield from self.rename(*rename, "The request for changes asks for a rename.")
            done.append(renamed_note(rename, count, "as requested"))
        elif feedback and not self.line_comments and not rename:
            first = self.first_changed_line
            if first is not None:
                line = yield from self.note(first[0], first[1], "", feedback)
                if line:
                    done.append(f"noted the request above the change in {first[0]} (line {line})")
        yield from self.run_tests("Running the tests after the review's changes.\n")
        if not done:
            return f"Read the request for changes (“{feedback}”); there was nothing in the files to change for it."
        return "Acted on the review: " + "; ".join(done) + "."

    def rename(self, old: str, new: str, why: str) -> Generator[ToolReply, ToolResult, int]:
        """Rename the identifier ``old`` to ``new`` wherever a search finds it: one
        ``str_replace`` per line, each with just enough context to match once."""
        found = yield self.call(
            SEARCH_TOOL_NAME, f"{why} Finding every use of {old} first.\n", pattern=old, fixed_string=True
        )
        word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(old)}(?![A-Za-z0-9_])")
        uses = [
            match
            for match in map(SEARCH_LINE.match, found.text.splitlines())
            if match and word.search(match.group("text"))
        ]
        paths = list(dict.fromkeys(match.group("path") for match in uses))
        if found.is_error or "more matches" in found.text or len(uses) > MAX_RENAMED_LINES:
            return 0
        if len(paths) > MAX_RENAMED_FILES:
            return 0
        changed = 0
        for path in paths:
            content = yield from self.read(path, f"Reading {path}.\n")
            if content is None:
                continue
            lines = content.split("\n")
            for index, line in enumerate(lines):
                if not word.search(line):
                    continue
                old_str, new_str = unique_context(lines, index, word.sub(new, line))
                result = yield self.edit(
                    f"Renaming {old} on line {index + 1} of {path}.\n",
                    command="str_replace",
                    path=path,
                    old_str=old_str,
                    new_str=new_str,
                )
                if not result.is_error:
                    lines[index] = word.sub(new, line)
                    changed += 1
        return changed

    def note(self, path: str, line: int, quote: str, body: str) -> Generator[ToolReply, ToolResult, int | None]:
        """Write ``body`` as a comment line above ``line`` of ``path`` (where the quoted
        lines are now, when they moved); the line it wrote, or None."""
        content = yield from self.read(path, f"Reading {path} around line {line}, where the comment is.\n")
        if content is None:
            return None
        lines = content.split("\n")
        first = quote.split("\n", 1)[0]
        if first.strip():
            places = [index + 1 for index, text in enumerate(lines) if text == first]
            if places:
                line = min(places, key=lambda place: abs(place - line))
        line = max(1, min(line, len(lines)))
        target = lines[line - 1] if lines else ""
        indent = target[: len(target) - len(target.lstrip())]
        start, end = next(
            (style for suffix, style in COMMENT_STYLES.items() if path.endswith(suffix)), DEFAULT_COMMENT_STYLE
        )
        result = yield self.edit(
            f"Following the comment “{body}” at {path}, line {line}.\n",
            command="insert",
            path=path,
            insert_line=line - 1,
            new_str=f"{indent}{start}{body}{end}\n",
        )
        return None if result.is_error else line
