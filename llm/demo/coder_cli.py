"""The demo Coder driving the Claude CLI's tools (``LLM_PROVIDER=claude-cli make demo``).

Run as the CLI's model, the demo Coder (llm/demo/coder.py) is offered the CLI's own
tools — Read, Edit, Write, Glob, Grep, Bash — not AutoCoder's. Its script stays the
same; each step is said in the CLI's words and each answer read back in the script's:

- the editor's ``view`` of ``.`` is ``Glob **/*`` (the CLI lists paths relative to its
  working folder), of a file ``Read`` (``N<tab>line``, as the editor numbers lines);
- ``create`` is ``Write``; ``str_replace`` is ``Edit``; ``insert`` is an ``Edit`` of
  the line it goes after (with as much context as makes it unique), from the file as
  last read and edited in this conversation;
- ``run_tests`` is ``Bash`` with the one command the CLI is allowed
  (``autocoder-run-tests``); ``search_code`` is ``Grep`` (``path:line:text``);
- ``start_subtask`` has no counterpart: it is skipped.

Paths are absolute under the CLI's working folder (its environment section says which;
``/workspace`` in its sandbox).
"""

from __future__ import annotations

import re
from typing import Any

from llm.demo.coder import DemoCoder
from llm.demo.coder_reading import (
    EDITOR_TOOL_NAME,
    RUN_TESTS_TOOL_NAME,
    SEARCH_TOOL_NAME,
    START_SUBTASK_TOOL_NAME,
    ToolResult,
    numbered_lines,
    result_text,
    unique_context,
)
from llm.demo.request import MessagesRequest, ToolReply

CLI_FILE_TOOLS = frozenset({"Read", "Edit", "Write"})
# What the CLI's Bash may run (llm/providers/claude_cli_sandbox.py TEST_RUNNER).
CLI_TEST_RUNNER = "autocoder-run-tests"
DEFAULT_ROOT = "/workspace"
WORKING_DIRECTORY = re.compile(r"Primary working directory: (\S+)")
GREP_LINE = re.compile(r"^(?P<path>[^\n:]+):(?P<line>\d+):(?P<text>.*)$")


def drives_the_cli(request: MessagesRequest) -> bool:
    """Whether the request is the Claude CLI's agent asking its model (its tools, not ours)."""
    names = set(request.tool_names)
    return names >= CLI_FILE_TOOLS and EDITOR_TOOL_NAME not in names and not request.forced_tool


def cli_coder_reply(request: MessagesRequest, delay: float) -> ToolReply | str:
    """The CLI's next tool call, or (a string) the Coder's summary once it is done."""
    match = WORKING_DIRECTORY.search(request.prompt_text)
    translator = Translator(match.group(1).rstrip("/") if match else DEFAULT_ROOT)
    return translated_reply(request, delay, translator, search_tool="Grep", shell_tool="Bash")


def translated_reply(
    request: MessagesRequest, delay: float, translator: Translator, *, search_tool: str, shell_tool: str | None
) -> ToolReply | str:
    """The demo Coder's next step in another agent's tools (``translator``'s words), or
    (a string) its summary once it is done. Our search and test tools are used where the
    agent offers ``search_tool`` and ``shell_tool`` (None: it may run no tests)."""
    names = set(request.tool_names)
    ours = {EDITOR_TOOL_NAME}
    if shell_tool in names:
        ours.add(RUN_TESTS_TOOL_NAME)
    if search_tool in names:
        ours.add(SEARCH_TOOL_NAME)
    script = DemoCoder(request, delay, available=frozenset(ours)).script()
    results = iter(request.tool_results)
    try:
        step = next(script)
        while True:
            call = translator.call(step)
            if call is None:  # no counterpart: the script goes on as if it were done
                step = script.send(ToolResult("ok"))
                continue
            block = next(results, None)
            if block is None:
                return call
            answer = ToolResult(result_text(block), bool(block.get("is_error")))
            step = script.send(translator.answer(step, answer))
    except StopIteration as done:
        return str(done.value)


class Translator:
    """One conversation's steps in the CLI's words; the files' text as this conversation
    last saw it (an ``insert`` needs the lines around it). Another agent's dialect
    (llm/demo/coder_opencode.py) overrides ``call`` and the readings of its answers."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.files: dict[str, list[str]] = {}

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative.lstrip('./')}" if relative not in (".", "") else self.root

    def call(self, step: ToolReply) -> ToolReply | None:
        spec = step.input
        if step.name == START_SUBTASK_TOOL_NAME:
            return None
        if step.name == RUN_TESTS_TOOL_NAME:
            return as_call(step, "Bash", command=CLI_TEST_RUNNER, description="Run the project's tests")
        if step.name == SEARCH_TOOL_NAME:
            grep = {"pattern": spec.get("pattern", ""), "path": self.root, "output_mode": "content", "-n": True}
            return as_call(step, "Grep", **grep)
        command, path = spec.get("command"), str(spec.get("path", ""))
        if command == "view" and path in (".", ""):
            return as_call(step, "Glob", pattern="**/*", path=self.root)
        if command == "view":
            return as_call(step, "Read", file_path=self.path(path))
        if command == "create":
            return as_call(step, "Write", file_path=self.path(path), content=spec.get("file_text", ""))
        if command == "str_replace":
            old, new = str(spec.get("old_str", "")), str(spec.get("new_str", ""))
            return as_call(step, "Edit", file_path=self.path(path), old_string=old, new_string=new)
        if command == "insert":
            old, new = self._insertion(path, int(spec.get("insert_line", 0)), str(spec.get("new_str", "")))
            return as_call(step, "Edit", file_path=self.path(path), old_string=old, new_string=new)
        return as_call(step, step.name or "Read", **spec)

    def _insertion(self, path: str, after: int, text: str) -> tuple[str, str]:
        lines = self.files.get(path) or [""]
        added = text.removesuffix("\n")
        if after <= 0:
            return unique_context(lines, 0, f"{added}\n{lines[0]}")
        index = min(after, len(lines)) - 1
        return unique_context(lines, index, f"{lines[index]}\n{added}")

    def answer(self, step: ToolReply, result: ToolResult) -> ToolResult:
        """The CLI's answer as the script's tool would have given it."""
        spec = step.input
        path = str(spec.get("path", ""))
        if result.is_error:
            return result
        result = self.in_cli_shape(step, result)
        if step.name == SEARCH_TOOL_NAME:
            found = [GREP_LINE.match(line) for line in result.text.splitlines()]
            lines = [f"{self._relative(m['path'])}:{m['line']}: {m['text']}" for m in found if m]
            return ToolResult("\n".join(lines))
        if step.name != EDITOR_TOOL_NAME:
            return result
        command = spec.get("command")
        if command == "view" and path in (".", ""):
            return ToolResult("\n".join(self._relative(line) for line in result.text.splitlines()))
        if command == "view":
            lines = numbered_lines(result.text)
            if lines and lines[-1] == "":  # the CLI numbers the empty line after the last newline
                lines.pop()
            self.files[path] = lines
            return ToolResult("\n".join(f"{number:6}\t{line}" for number, line in enumerate(lines, start=1)))
        self._edited(path, spec)
        return result

    def in_cli_shape(self, step: ToolReply, result: ToolResult) -> ToolResult:
        """The agent's answer to ``step`` as the CLI gives it (another dialect rewrites it)."""
        return result

    def _edited(self, path: str, spec: dict[str, Any]) -> None:
        """Keep this conversation's copy of ``path`` as the edit left it."""
        command = spec.get("command")
        if command == "create":
            self.files[path] = str(spec.get("file_text", "")).removesuffix("\n").split("\n")
        elif path in self.files and command in ("str_replace", "insert"):
            if command == "insert":
                old, new = self._insertion(path, int(spec.get("insert_line", 0)), str(spec.get("new_str", "")))
            else:
                old, new = str(spec.get("old_str", "")), str(spec.get("new_str", ""))
            self.files[path] = "\n".join(self.files[path]).replace(old, new, 1).split("\n")

    def _relative(self, path: str) -> str:
        return path[len(self.root) + 1 :] if path.startswith(f"{self.root}/") else path


def as_call(step: ToolReply, name: str, **tool_input: Any) -> ToolReply:
    return ToolReply(name=name, text=step.text, input=tool_input, chunk_delay=step.chunk_delay)
