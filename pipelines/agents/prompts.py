"""The three agents: their tools (structured output), prompts and output checks.

Each agent is given exactly one tool and ``tool_choice`` forcing it, so its answer is
the tool's input. The input is validated against the tool's JSON schema (and a few
rules a schema cannot say); an invalid answer is retried once with the errors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from llm.providers.base import Tool
from pipelines.models import CODER, DISTILLER, PLANNER, REVIEWER

LESSONS_MAX = 3
LESSON_TEXT_MAX_LENGTH = 400
LESSON_APPLIES_WHEN_MAX_LENGTH = 200

PLAN_TOOL = Tool(
    name="submit_plan",
    description="Submit the ordered subtasks that together complete the task.",
    input_schema={
        "type": "object",
        "properties": {
            "subtasks": {
                "type": "array",
                "minItems": 1,
                "maxItems": 20,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "minLength": 1, "maxLength": 50},
                        "title": {"type": "string", "minLength": 1, "maxLength": 200},
                        "description": {"type": "string", "maxLength": 5000},
                        "order": {"type": "integer", "minimum": 0},
                    },
                    "required": ["id", "title", "description", "order"],
                },
            }
        },
        "required": ["subtasks"],
    },
)

REVIEW_TOOL = Tool(
    name="submit_review",
    description="Submit the review verdict and every finding.",
    input_schema={
        "type": "object",
        "properties": {
            "pass": {"type": "boolean"},
            "findings": {
                "type": "array",
                "maxItems": 100,
                "items": {
                    "type": "object",
                    "properties": {
                        "file": {"type": "string"},
                        "line": {"type": ["integer", "null"]},
                        "severity": {"enum": ["info", "minor", "major", "critical"]},
                        "message": {"type": "string", "minLength": 1, "maxLength": 5000},
                    },
                    "required": ["file", "severity", "message"],
                },
            },
        },
        "required": ["pass", "findings"],
    },
)

LESSONS_TOOL = Tool(
    name="record_lessons",
    description="Record the lessons the team should apply on later tasks of this project.",
    input_schema={
        "type": "object",
        "properties": {
            "lessons": {
                "type": "array",
                "maxItems": LESSONS_MAX,
                # A lesson with when it applies and the files it is about; a bare string
                # (no line, the whole project's) is still taken.
                "items": {
                    "anyOf": [
                        {
                            "type": "object",
                            "properties": {
                                "lesson": {"type": "string", "minLength": 1, "maxLength": LESSON_TEXT_MAX_LENGTH},
                                "applies_when": {"type": "string", "maxLength": LESSON_APPLIES_WHEN_MAX_LENGTH},
                                "files": {
                                    "type": "array",
                                    "maxItems": 20,
                                    "items": {"type": "string", "maxLength": 1000},
                                    "description": "The files it is about, from those named in what was said; "
                                    "empty when it is a rule for the whole project.",
                                },
                            },
                            "required": ["lesson", "applies_when"],
                        },
                        {"type": "string", "minLength": 1, "maxLength": LESSON_TEXT_MAX_LENGTH},
                    ]
                },
            }
        },
        "required": ["lessons"],
    },
)

# One sentence per role teaches the marker (pipelines/agents/memories.py).
MEMORY_MARKER_HINT = (
    "When you learn something about this project that later tasks should know — a convention, "
    "a pitfall — write it as [MEMORY: the lesson] in your answer; it is kept for the team."
)
REMEMBER_TOOL_HINT = (
    "When you learn something about this project that later tasks should know — a convention, "
    "a pitfall — call remember with it (or write [MEMORY: the lesson] in your text); it is kept for the team."
)

SYSTEM_PROMPTS = {
    PLANNER: (
        "You are the Planner of a software team. Split the task into a short ordered list "
        "of concrete subtasks a developer can implement. Answer only by calling submit_plan. " + MEMORY_MARKER_HINT
    ),
    REVIEWER: (
        "You are the Reviewer of a software team. Check the changes against the task and the "
        "plan: correctness, missing pieces, bugs, tests. Set pass to true only if the change "
        "can be merged as it is. Answer only by calling submit_review. " + MEMORY_MARKER_HINT
    ),
    DISTILLER: (
        "You keep a software team's memory. From what a person or a reviewer said about one change, "
        f"write at most {LESSONS_MAX} lessons the team should apply on later tasks of the same project: "
        "conventions, preferences, recurring mistakes. Each lesson is one short imperative sentence that "
        "stands on its own (no 'this task', no line numbers). With each lesson write applies_when: one short "
        "line naming the kinds of tasks and files it is for (e.g. 'adding or changing API endpoints or "
        "serializers'), in the words a later task would use; name a path only if the lesson is about it. "
        "Give in files the files a lesson is about when what was said concerned particular files and the "
        "lesson holds for them only; leave files empty when it is a rule for the whole project. "
        "Leave out what mattered only for this one change; an empty list is a fine answer. "
        "Answer only by calling record_lessons."
    ),
}


@dataclass(frozen=True)
class AgentSpec:
    name: str
    # The tool the agent answers with; None for the Coder, whose answer is its edits
    # (its role, CODER_EDITING_ROLE or CODER_CLI_EDITING_ROLE, is given with each call).
    tool: Tool | None

    def system_prompt(self, memory_context: str, instructions: str = "", *, role: str | None = None) -> str:
        """The role (``role``, default the agent's), then the project's instructions
        (instructions_block), then the memory context. Stable across a phase's turns: it
        is the cached prompt prefix."""
        return "\n\n".join(filter(None, [role or SYSTEM_PROMPTS[self.name], instructions, memory_context]))

    def validate(self, tool_input: dict[str, Any] | None) -> list[str]:
        """Human-readable problems with the agent's answer; empty when it is valid."""
        assert self.tool is not None, f"the {self.name} answers with no tool"
        if tool_input is None:
            return [f"No valid JSON input was given to {self.tool.name}."]
        validator = Draft202012Validator(self.tool.input_schema)
        errors = [
            f"{'/'.join(str(part) for part in error.absolute_path) or '(root)'}: {error.message}"
            for error in sorted(validator.iter_errors(tool_input), key=lambda e: list(e.absolute_path))
        ]
        return errors[:20]


AGENTS = {
    spec.name: spec
    for spec in (
        AgentSpec(PLANNER, PLAN_TOOL),
        AgentSpec(CODER, None),
        AgentSpec(REVIEWER, REVIEW_TOOL),
        AgentSpec(DISTILLER, LESSONS_TOOL),
    )
}


def instructions_block(*, repository_file: tuple[str, str] | None, project_instructions: str) -> str:
    """The "Project instructions" section of every agent's system prompt: the
    repository's AGENTS.md/CLAUDE.md (named) and the project's own setting; empty when
    there are neither."""
    parts = []
    if repository_file is not None and repository_file[1]:
        name, text = repository_file
        parts.append(f"## From {name} in the repository\n{text}")
    if project_instructions.strip():
        parts.append(f"## From the project's settings\n{project_instructions.strip()}")
    if not parts:
        return ""
    return "# Project instructions\nFollow these unless the task says otherwise.\n\n" + "\n\n".join(parts)


def _task_block(title: str, description: str) -> str:
    return f"# Task\nTitle: {title}\n\n{description or '(no description)'}"


# The Coder editing the run's worktree with its tools (pipelines/agents/coder.py).
# A person's message to the run, added to what the agent is told at its next turn.
MESSAGE_FROM_PERSON = (
    "A message from {author}, who is watching your work. Read it and take it into account from now on:\n\n{body}"
)

CODER_EDITING_ROLE = (
    "You are the Coder of a software team. You work directly in a checkout of the project's "
    "repository with tools. Read files with the str_replace_based_edit_tool `view` command "
    "(a directory lists its contents) and search_code; change them with its `str_replace` "
    "(old_str must match the file exactly, once, whitespace included — include enough context), "
    "`create` and `insert` commands, and delete_file. Work through the plan's subtasks in order: "
    "when you begin one, call start_subtask with its `order` first (the person follows your progress "
    "by it), then make its edits. Check your change with run_tests when it is complete (runs are "
    "limited). Use relative paths inside the repository. When review findings, failing tests or "
    "requested changes are given, fix every one of them. When you are done, answer with a short "
    "plain-text summary of what you changed and why, without calling a tool: your edits in the "
    "repository are the change. " + REMEMBER_TOOL_HINT
)

# The same Coder when the Claude CLI edits the worktree: its own tools' names.
CODER_CLI_EDITING_ROLE = (
    "You are the Coder of a software team. You work directly in a checkout of the project's "
    "repository (your working directory) with your file tools: Read, Glob and Grep to look "
    "around, Edit and Write to change files. Work through the plan's subtasks in "
    "order. When a test command is allowed (Bash with exactly the command named below), run it "
    "once your change is complete; no other shell command and no network tool is available. "
    "Use paths inside the repository only. When review findings, failing tests or requested changes are "
    "given, fix every one of them. When you are done, answer with a short plain-text summary of "
    "what you changed and why: your edits in the repository are the change. " + MEMORY_MARKER_HINT
)

# The Coder as a coding agent over ACP (pipelines/agents/coder_acp.py): its own tools,
# whatever they are called; what it may do is the same as the CLI's.
CODER_ACP_EDITING_ROLE = (
    "You are the Coder of a software team. You work directly in a checkout of the project's "
    "repository (your working directory) with your own tools for reading, searching and editing files. "
    "Work through the plan's subtasks in order. The only shell command you may run is the project's "
    "test command, exactly as named below, once your change is complete: every other command, and every "
    "file outside the repository, is refused. When review findings, failing tests or requested changes "
    "are given, fix every one of them. When you are done, answer with a short plain-text summary of "
    "what you changed and why: your edits in the repository are the change. " + MEMORY_MARKER_HINT
)


def coder_editing_prompt(
    *,
    title: str,
    description: str,
    plan: list[dict[str, Any]],
    findings: list[dict[str, Any]],
    feedback: str,
    branch_diff: str,
    line_comments: Sequence[Mapping[str, Any]] = (),
    reply_hint: str = "",
    feedback_from: str = "the person reviewing",
    has_start_subtask: bool = True,
) -> str:
    """The Coder's task when it edits the worktree: the task, the plan, what the branch
    already changed, and in fix rounds the findings (failing tests included) and the
    person's requested changes with their comments on lines (``{"id", "path", "lines",
    "quote", "body"}``, pipelines.review.selectors), with ``reply_hint``: how this Coder
    says why it leaves a comment's lines as they are (pipelines/agents/replies.py).
    ``has_start_subtask``: the built-in Coder's own tool; the Claude CLI and ACP agents
    have only theirs, and are not told to call one they lack."""
    parts = [_task_block(title, description), "# Plan\n" + json.dumps(plan, indent=2)]
    if branch_diff:
        parts.append("# Already changed on your branch (committed; the files hold it)\n" + branch_diff)
    if findings:
        parts.append("# Review findings to fix\n" + json.dumps(findings, indent=2))
    if feedback:
        parts.append(f"# Changes requested by {feedback_from}\n" + feedback)
    if line_comments:
        parts.append(_line_comments_block(line_comments, reply_hint))
    parts.append(
        "Make the changes in the repository, subtask by subtask: call start_subtask as you begin each "
        "one. Then answer with a short summary."
        if has_start_subtask
        else "Make the changes in the repository, subtask by subtask, in the plan's order. Then answer with a "
        "short summary."
    )
    return "\n\n".join(parts)


def _fence(code: str) -> str:
    """A Markdown fence longer than any run of backticks in ``code``."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    return "`" * max(3, longest + 1)


def _line_comments_block(comments: Sequence[Mapping[str, Any]], reply_hint: str = "") -> str:
    intro = (
        "# Comments on lines of your changes, by the person reviewing\n"
        "Each names a file and lines of it as your branch had them when the comment was written, "
        "quotes them, and says what to change there. Address every one. The person is shown, for each "
        "comment, whether your round changed its lines."
    )
    parts = [f"{intro} {reply_hint}".strip()]
    for comment in comments:
        quote = str(comment.get("quote") or "")
        fence = _fence(quote)
        # The number is the comment's id: what a reply names.
        number = f" (comment {comment['id']})" if comment.get("id") is not None else ""
        parts.append(
            f"## {comment['path']}, {comment['lines']}{number}\n{fence}\n{quote}\n{fence}\nComment: {comment['body']}"
        )
    return "\n\n".join(parts)


def planner_prompt(*, title: str, description: str, file_tree: str = "") -> str:
    parts = [_task_block(title, description)]
    if file_tree:
        parts.append("# Files in the repository\n" + file_tree)
    parts.append("Plan this task.")
    return "\n\n".join(parts)


def reviewer_prompt(
    *, title: str, description: str, plan: list[dict[str, Any]], diff_text: str, verify_summary: str = ""
) -> str:
    parts = [
        _task_block(title, description),
        "# Plan\n" + json.dumps(plan, indent=2),
        "# Changes (unified diff)\n" + (diff_text or "(no changes)"),
    ]
    if verify_summary:
        parts.append("# The project's tests on this branch\n" + verify_summary)
    parts.append("Review the changes.")
    return "\n\n".join(parts)


def distiller_prompt(*, title: str, origin: str, texts: list[str], files: Sequence[Sequence[str]] = ()) -> str:
    """What the distiller reads: the task's title and what was said about the change,
    each with the files it was said about (``files``, same order)."""

    def about(index: int) -> str:
        named = files[index] if index < len(files) else ()
        return f" [about {', '.join(named)}]" if named else ""

    said = "\n".join(f"- {' '.join(text.split())}{about(index)}" for index, text in enumerate(texts))
    return f"# Task\nTitle: {title}\n\n# {origin[:1].upper() + origin[1:]}\n{said}\n\nRecord the lessons."
