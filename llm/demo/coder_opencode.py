"""The demo Coder driving opencode's tools (a project whose Coder is the ACP agent
``opencode``, in ``make demo``: opencode asks the demo model through Chat Completions).

opencode offers its own tools — read, write, edit, bash, glob, grep, todowrite, task… —
not AutoCoder's nor the Claude CLI's. The script is the demo Coder's (llm/demo/coder.py),
said as to the Claude CLI (llm/demo/coder_cli.py) and then in opencode's words:

- ``Read``/``Write``/``Edit`` are ``read``/``write``/``edit`` (``filePath``,
  ``oldString``, ``newString``); ``Glob`` is ``glob``; ``Grep`` is ``grep``;
- running the tests is ``bash`` with the project's test command, exactly as AutoCoder
  named it in the prompt (llm/acp/provider.py ``TEST_COMMAND_HINT``): it is the one
  command AutoCoder lets an ACP agent run;
- its answers are read back in the CLI's shapes: ``read`` numbers lines ``N: text``
  inside ``<content>``, ``grep`` groups ``Line N: text`` under each file, ``bash``
  answers the command's output only (the demo repository's runner says ``FAILED``).

opencode also asks its model for a title (no tools): that request gets the demo's chat
answer, like any other side request.
"""

from __future__ import annotations

import re
from typing import Any

from llm.demo.coder_cli import DEFAULT_ROOT, Translator, as_call, translated_reply
from llm.demo.coder_reading import EDITOR_TOOL_NAME, RUN_TESTS_TOOL_NAME, SEARCH_TOOL_NAME, ToolResult
from llm.demo.request import MessagesRequest, ToolReply

OPENCODE_TOOLS = frozenset({"read", "write", "edit", "bash", "glob", "grep"})
# What AutoCoder tells an ACP agent about its test command (llm/acp/provider.py
# TEST_COMMAND_HINT; a test keeps the two in step).
TEST_COMMAND = re.compile(r"The project's test command, the one shell command you may run: `(?P<command>[^`\n]+)`")
WORKING_DIRECTORY = re.compile(r"Working directory: (\S+)")
READ_LINE = re.compile(r"^(\d+): ?(.*)$")
GREP_FILE = re.compile(r"^(/[^\n]*):$")
GREP_HIT = re.compile(r"^\s+Line (\d+): ?(.*)$")
# The demo repository's runner (run_tests.py) prints FAILED and "N failed".
TESTS_FAILED = re.compile(r"\bFAILED\b|^[1-9]\d* failed$", re.MULTILINE)
# The Claude CLI's tool inputs, by opencode's names.
RENAMED_KEYS = {"file_path": "filePath", "old_string": "oldString", "new_string": "newString"}


def drives_opencode(request: MessagesRequest) -> bool:
    """Whether the request is opencode's agent asking its model (its tools, not ours)."""
    names = set(request.tool_names)
    return names >= OPENCODE_TOOLS and EDITOR_TOOL_NAME not in names and not request.forced_tool


def opencode_coder_reply(request: MessagesRequest, delay: float) -> ToolReply | str:
    """opencode's next tool call, or (a string) the Coder's summary once it is done."""
    where = WORKING_DIRECTORY.search(request.system_text)
    named = TEST_COMMAND.search(request.prompt_text)
    translator = OpencodeTranslator(
        where.group(1).rstrip("/") if where else DEFAULT_ROOT, named.group("command") if named else ""
    )
    return translated_reply(
        _with_our_system_prompt(request), delay, translator, search_tool="grep", shell_tool="bash" if named else None
    )


def _with_our_system_prompt(request: MessagesRequest) -> MessagesRequest:
    """ACP has no system prompt: AutoCoder's leads the one prompt, before a ``---`` line
    (llm/acp/provider.py). The demo Coder reads the lessons taught in it there."""
    texts = request.message_texts
    ours, separator, _ = (texts[0] if texts else "").partition("\n\n---\n\n")
    if not separator:
        return request
    return MessagesRequest(
        path=request.path, headers=request.headers, body={**request.body, "system": ours}, wire_body=request.wire_body
    )


class OpencodeTranslator(Translator):
    def __init__(self, root: str, test_command: str) -> None:
        super().__init__(root)
        self.test_command = test_command

    def call(self, step: ToolReply) -> ToolReply | None:
        said = super().call(step)
        if said is None:
            return None
        if step.name == RUN_TESTS_TOOL_NAME:
            return as_call(step, "bash", command=self.test_command, description="Run the project's tests")
        spec: dict[str, Any] = {RENAMED_KEYS.get(key, key): value for key, value in said.input.items()}
        if said.name == "Grep":
            spec = {"pattern": spec["pattern"], "path": spec["path"]}
        return as_call(step, str(said.name).lower(), **spec)

    def in_cli_shape(self, step: ToolReply, result: ToolResult) -> ToolResult:
        if step.name == RUN_TESTS_TOOL_NAME:
            return ToolResult(result.text, bool(TESTS_FAILED.search(result.text)))
        if step.name == SEARCH_TOOL_NAME:
            return ToolResult("\n".join(_grep_lines(result.text)))
        if step.name == EDITOR_TOOL_NAME and step.input.get("command") == "view":
            if str(step.input.get("path", "")) in (".", ""):
                return ToolResult("\n".join(line for line in result.text.splitlines() if line.startswith("/")))
            content = result.text.partition("<content>\n")[2].rpartition("</content>")[0]
            found = [READ_LINE.match(line) for line in content.splitlines()]
            return ToolResult("\n".join(f"{match[1]}\t{match[2]}" for match in found if match))
        return result


def _grep_lines(text: str) -> list[str]:
    """opencode's grep answer (a file's path, then ``Line N: text`` under it) as
    ``path:N:text`` lines."""
    lines, path = [], ""
    for line in text.splitlines():
        heading, hit = GREP_FILE.match(line), GREP_HIT.match(line)
        if heading:
            path = heading[1]
        elif hit and path:
            lines.append(f"{path}:{hit[1]}:{hit[2]}")
    return lines
