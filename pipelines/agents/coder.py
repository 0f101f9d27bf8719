"""The Coder editing a run's worktree with tools: a conversation, not one answer.

When a run has a worktree and its provider supports tools, the Coder is given the text
editor, search_code, delete_file and run_tests (repos/coder_tools.py) and edits the
files itself: each reply's tool calls are run in the worktree and their results sent
back, until a reply calls no tool (its text is the Coder's summary) or the phase is out
of turns (``CODER_MAX_TURNS``) or tokens (``CODER_TOKEN_LIMIT``, as billed). A reply cut off
at the output limit (``max_tokens``) is continued. Every call is recorded and costed
like any agent call (a resumed phase reuses the replies already bought: the worktree
is reset to the last commit and the same tool calls are run again), every tool call
shows in the Coder's live log, and the phase stops between turns and inside a test run
once cancelled or its lease is lost. The caller commits what the worktree holds.

Beside the repository's tools the Coder has ``start_subtask``, a pipelines tool answered
here: it says which subtask of the plan it begins, the run keeps it
(``PipelineRun.current_subtask``, cleared by the next change of status), the task page
marks it live (a ``subtask-change`` event) and the Coder's log says so. And ``remember``:
a lesson for later tasks, stored like a ``[MEMORY: …]`` marker in its text
(pipelines/agents/memories.py), which the summary is stripped of. And, in a round sent a
person's comments on lines, ``reply_to_comment``: why it left a comment's lines as they
were (pipelines/agents/replies.py), kept on the comment when the round ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from llm.context_editing import context_editing_configured
from llm.providers.base import LLMRequest, LLMResult, Tool, ToolCall
from memory.markers import agent_memory_value
from pipelines.agent_log import AgentLogStream
from pipelines.agents import prompts as agents
from pipelines.agents.conversation import agent_system_prompt
from pipelines.agents.memories import PhaseMemories
from pipelines.agents.recall import Recall
from pipelines.agents.replies import REPLY_KEPT, REPLY_TO_COMMENT, CommentReplies
from pipelines.agents.turns import AgentTurns, PhaseInterrupted, should_stop, stopped_between_turns
from pipelines.models import PipelineRun
from pipelines.runs.leases import Lease
from pipelines.runs.selectors import run_subtask_index
from pipelines.runs.services import run_subtask_start
from pipelines.runs.workspace import repository_test_command, run_test_environment, workspace_record_written

CONTINUE_AFTER_CUT = (
    "Your reply was cut off at the output limit. Continue where you stopped; keep each edit "
    "small (one str_replace or insert at a time)."
)
OUT_OF_TURNS = (
    "The Coder ran out of {what} ({limit:,}) before it finished: what it had done so far is "
    "committed. Check the plan's subtasks against the diff and finish what is missing."
)

# A pipelines tool, not a repository one: it moves the run's marker on the task page.
START_SUBTASK = Tool(
    name="start_subtask",
    description=(
        "Call this when you begin a subtask of the plan, before its first edit, with the subtask's "
        "`order` from the plan. The task page shows the person which subtask you are on. Work "
        "through the subtasks in order; call it once per subtask (again for a subtask you go back to)."
    ),
    input_schema={
        "type": "object",
        "properties": {"order": {"type": "integer", "description": "The subtask's `order` in the plan."}},
        "required": ["order"],
    },
)
SUBTASK_STARTED = "Subtask {position} of {count}: {title}. Go on."
UNKNOWN_SUBTASK = "The plan has no subtask with order {order!r}; its subtasks' orders are {orders}."

# A pipelines tool too: the same as a [MEMORY: …] marker, for models that prefer tools.
REMEMBER = Tool(
    name="remember",
    description=(
        "Keep a lesson about this project that later tasks should know — a convention, a pitfall, "
        "how to run something — for the team. One short sentence per call; not for the task's progress."
    ),
    input_schema={
        "type": "object",
        "properties": {"lesson": {"type": "string", "description": "The lesson, in one sentence."}},
        "required": ["lesson"],
    },
)
LESSON_KEPT = "Kept for the team. Go on."
LESSON_MISSING = "Give the lesson itself in `lesson`: one sentence a later task can use."
LESSON_NOT_KEPT = "It could not be stored just now; go on with the task."


@dataclass
class CoderConversation:
    summary: str
    out_of_turns: bool
    turns: int
    finding: dict[str, Any] | None = None
    # Each tool call and what it answered, for the run's lineage.
    steps: list[dict[str, Any]] = field(default_factory=list)
    # Why it left a line comment's lines as they were, by the comment's id.
    replies: dict[int, str] = field(default_factory=dict)


def code_in_worktree(
    run: PipelineRun, lease: Lease, prompt: str, worktree: Path, *, recall: Recall, comment_ids: Collection[int] = ()
) -> CoderConversation:
    """Let the Coder edit ``worktree`` until it is done or out of turns; its summary.
    ``recall`` (pipelines.agents.recall) goes into the system prompt of every turn;
    ``comment_ids``: the line comments the prompt sends it, which it may reply to."""
    from repos.coder_tools import CoderSession, coder_tools

    system = agent_system_prompt(run, agents.CODER, worktree, recall=recall, role=agents.CODER_EDITING_ROLE)
    turns = AgentTurns(run, lease, agents.CODER, recalled=recall.record())
    log = turns.log
    server_tools, client_tools = coder_tools()
    client_tools = (*client_tools, REMEMBER)
    if run.plan:
        client_tools = (*client_tools, START_SUBTASK)
    replies = CommentReplies(comment_ids)
    if comment_ids:
        client_tools = (*client_tools, REPLY_TO_COMMENT)
    test_command = repository_test_command(run)
    sandbox, masker = run_test_environment(run)
    session = CoderSession(
        on_output=log.write, should_cancel=lambda: should_stop(lease), project=sandbox, masker=masker
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    # Old tool results (files viewed, test output) cleared once the conversation is long:
    # the messages here stay whole, the provider clears (llm/context_editing.py).
    context_editing = context_editing_configured()
    taken = tokens = 0
    steps: list[dict[str, Any]] = []
    while True:
        if stopped_between_turns(lease):
            log.flush()
            raise PhaseInterrupted
        if taken >= settings.CODER_MAX_TURNS or tokens >= settings.CODER_TOKEN_LIMIT:
            what, limit = (
                ("turns", settings.CODER_MAX_TURNS)
                if taken >= settings.CODER_MAX_TURNS
                else ("tokens", settings.CODER_TOKEN_LIMIT)
            )
            message = OUT_OF_TURNS.format(what=what, limit=limit)
            log.write(f"\n[{message}]\n")
            log.flush()
            finding = {"file": "", "line": None, "severity": "major", "message": message}
            return CoderConversation(
                summary="", out_of_turns=True, turns=taken, finding=finding, steps=steps, replies=replies.by_comment
            )
        # A person's messages to the run, read now: in this turn's question.
        messages = turns.hear(messages, turn=taken)
        request = LLMRequest(
            system=system,
            messages=messages,
            model=run.model_for(agents.CODER),
            max_tokens=run.max_tokens,
            tool=None,
            explore_tools=client_tools,
            server_tools=server_tools,
            context_editing=context_editing,
        )
        # The recorded reply keeps its markers (a replay compares against it); the
        # summary, the commit message and the lineage do not (``turn.shown``).
        turn = turns.take(request)
        turns.record(turn)
        result = turn.result
        taken += 1
        tokens += result.billed_tokens
        if result.stop_reason == "max_tokens":
            messages = [*messages, *_continuation(result)]
            log.write("\n[Cut off at the output limit; continuing.]\n")
            log.flush()
            continue
        if not result.tool_calls:
            log.flush()
            # A reply written as the CLI's marker is a reply too (pipelines/agents/replies.py).
            summary = replies.take_markers(turn.shown) if comment_ids else turn.shown.strip()
            return CoderConversation(
                summary=summary, out_of_turns=False, turns=taken, steps=steps, replies=replies.by_comment
            )
        if stopped_between_turns(lease):
            log.flush()
            raise PhaseInterrupted
        tool_results = []
        for call in result.tool_calls:
            if call.name == START_SUBTASK.name:
                tool_results.append(_start_subtask(run, lease, call, log))
            elif call.name == REMEMBER.name:
                tool_results.append(_remember(call, log, turns.memories, reused=turn.reused))
            elif call.name == REPLY_TO_COMMENT.name and comment_ids:
                tool_results.append(_reply_to_comment(call, log, replies))
            else:
                tool_results.append(
                    _run_tool(
                        worktree,
                        call,
                        log,
                        test_command=test_command,
                        session=session,
                        steps=steps,
                        on_written=lambda path: workspace_record_written(run, [path]),
                    )
                )
        log.flush()
        messages = [
            *messages,
            {"role": "assistant", "content": result.content},
            {"role": "user", "content": tool_results},
        ]


def _continuation(result: LLMResult) -> list[dict[str, Any]]:
    """The turns that continue a reply cut off at the output limit: its text (a tool
    call cut off mid-input is dropped: it cannot be run), then the request to go on."""
    text = [block for block in result.content if isinstance(block, dict) and block.get("type") == "text"]
    text = [block for block in text if str(block.get("text", "")).strip()]
    content = text or [{"type": "text", "text": "(cut off)"}]
    return [{"role": "assistant", "content": content}, {"role": "user", "content": CONTINUE_AFTER_CUT}]


def _run_tool(
    worktree: Path,
    call: ToolCall,
    log: AgentLogStream,
    *,
    test_command: str,
    session: Any,
    steps: list[dict[str, Any]],
    on_written: Callable[[str], None],
) -> dict[str, Any]:
    from repos.coder_tools import coder_tool_run

    arguments = json.dumps(call.input or {}, ensure_ascii=False)[:200]
    log.write(f"\n→ {call.name} {arguments}\n")
    outcome = coder_tool_run(worktree, call.name, call.input, test_command=test_command, session=session)
    if outcome.changed_path and not outcome.is_error:
        # Kept at once: a new file is committed only when the Coder wrote it (the commit
        # rule, pipelines/runs/workspace.py), and a worker may die before the commit.
        on_written(outcome.changed_path)
    text = outcome.content or "(empty)"
    log.write(_result_for_log(text, is_error=outcome.is_error))
    steps.append(
        {
            "tool": call.name,
            "input": _shortened(call.input or {}),
            "is_error": outcome.is_error,
            "result": text[:STEP_RESULT_CHARS],
        }
    )
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id, "content": text}
    if outcome.is_error:
        block["is_error"] = True
    return block


# What the live log shows of a tool's result: enough to follow the edit it made or the
# tests it ran; the whole result is in the conversation (and its lineage).
LOG_RESULT_LINES = 12
LOG_RESULT_CHARS = 1500


def _result_for_log(text: str, *, is_error: bool) -> str:
    lines = text[:LOG_RESULT_CHARS].splitlines()[:LOG_RESULT_LINES]
    hidden = len(text.splitlines()) - len(lines)
    shown = "\n".join(f"  {line}" for line in lines)
    if is_error and shown:
        shown = "  error: " + shown[2:]
    more = f"\n  … {hidden} more line{'s' if hidden != 1 else ''}" if hidden > 0 else ""
    return f"{shown}{more}\n"


STEP_RESULT_CHARS = 500
STEP_VALUE_CHARS = 2000


def _shortened(tool_input: dict[str, Any]) -> dict[str, Any]:
    """A tool call's input for the lineage: long texts (a created file) cut short."""
    return {
        name: value[:STEP_VALUE_CHARS] + "…" if isinstance(value, str) and len(value) > STEP_VALUE_CHARS else value
        for name, value in tool_input.items()
    }


def _start_subtask(run: PipelineRun, lease: Lease, call: ToolCall, log: AgentLogStream) -> dict[str, Any]:
    """The Coder says which subtask it begins: the run's marker moves (the page follows
    live) and its log says so."""
    order = (call.input or {}).get("order")
    index = run_subtask_index(run=run, order=order)
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id}
    if index is None or not isinstance(order, int):
        orders = ", ".join(str(subtask.get("order")) for subtask in run.plan if isinstance(subtask, dict))
        text = UNKNOWN_SUBTASK.format(order=order, orders=orders or "none")
        log.write(f"\n→ {call.name} {json.dumps(call.input or {}, ensure_ascii=False)[:200]}\n  error: {text}\n")
        return {**block, "content": text, "is_error": True}
    log.flush()  # the lines before it reach the page before the marker moves
    run_subtask_start(run=run, order=order, held_by=lease.token)
    title = str(run.plan[index].get("title", "")).strip() or f"subtask {order}"
    log.write(f"\n— Subtask {index + 1} of {len(run.plan)}: {title} —\n")
    return {**block, "content": SUBTASK_STARTED.format(position=index + 1, count=len(run.plan), title=title)}


def _remember(call: ToolCall, log: AgentLogStream, memories: PhaseMemories, *, reused: bool) -> dict[str, Any]:
    """The Coder keeps a lesson: stored (once) and confirmed in its log."""
    lesson = (call.input or {}).get("lesson")
    lesson = agent_memory_value(lesson) if isinstance(lesson, str) else ""
    log.write(f"\n→ {call.name} {json.dumps(call.input or {}, ensure_ascii=False)[:200]}\n")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id}
    if not lesson:
        log.write(f"  error: {LESSON_MISSING}\n")
        return {**block, "content": LESSON_MISSING, "is_error": True}
    if not memories.keep(lesson, reused=reused):
        return {**block, "content": LESSON_NOT_KEPT, "is_error": True}
    return {**block, "content": LESSON_KEPT}


def _reply_to_comment(call: ToolCall, log: AgentLogStream, replies: CommentReplies) -> dict[str, Any]:
    """The Coder answers a line comment: kept for the round's end, and in its log."""
    tool_input = call.input or {}
    log.write(f"\n→ {call.name} {json.dumps(tool_input, ensure_ascii=False)[:200]}\n")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.id}
    problem = replies.take(tool_input.get("comment"), tool_input.get("reply"))
    if problem:
        log.write(f"  error: {problem}\n")
        return {**block, "content": problem, "is_error": True}
    return {**block, "content": REPLY_KEPT.format(comment=tool_input.get("comment"))}
