"""Calling a phase's agent for its answer (the Planner's plan, the Reviewer's review,
the Distiller's lessons): the system prompt, then the answer loop.

The agent may explore the repository with read-only tools first; an answer that does
not validate is asked for once more. Each turn — reused or bought, streamed, recorded,
its memory markers kept — is pipelines/agents/turns.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings

from llm.context_editing import context_editing_configured
from llm.providers.base import LLMRequest, LLMResult, Tool, ToolCall
from memory.selectors import memory_prompt_context
from memory.selectors.facts import memory_system_instructions
from pipelines.agent_log import AgentLogStream
from pipelines.agents import prompts as agents
from pipelines.agents.recall import Recall, recall_for_phase
from pipelines.agents.turns import AgentTurns
from pipelines.models import PipelineRun
from pipelines.runs.leases import Lease
from repos.instructions import repository_instructions


class InvalidAgentOutput(Exception):
    pass


def agent_system_prompt(
    run: PipelineRun, agent_name: str, root: Path | None, *, recall: Recall, role: str | None = None
) -> str:
    """The agent's system prompt: its role, the project's instructions (AGENTS.md or
    CLAUDE.md at ``root``, and the project's setting), the memory context: facts and
    goals, then what the phase recalled (``recall``: memories and the agent's notes)."""
    project = run.task.project
    memory = memory_prompt_context(user=project.owner, project=project)
    instructions = agents.instructions_block(
        repository_file=repository_instructions(root) if root is not None else None,
        project_instructions=project.instructions,
    )
    memory_context = "\n\n".join(filter(None, [memory, recall.block, memory_system_instructions()]))
    return agents.AGENTS[agent_name].system_prompt(memory_context, instructions, role=role)


def call_agent(
    run: PipelineRun,
    lease: Lease,
    agent_name: str,
    prompt: str,
    *,
    worktree: Path | None = None,
    instructions_from: Path | None = None,
    bare: bool = False,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """Call the agent until its answer validates (one retry with the errors).

    Given a worktree (and a provider that can), the agent may first explore the
    repository with read-only tools: at most AGENT_TOOL_MAX_TURNS tool turns and
    AGENT_TOOL_TOKEN_LIMIT tokens, then its answer is forced. Every turn is a recorded,
    costed call, and every tool call shows in the agent's live log.

    The system prompt, read once here for all the phase's turns, has the project's
    instructions: AGENTS.md/CLAUDE.md at the root of ``instructions_from`` (default: the
    worktree) and the project's setting. A ``bare`` call (the distiller, which reads
    only what it is given) has its role alone: no instructions, memories or notes.
    ``max_tokens`` caps the answer below the run's own limit. Before each call the
    agent reads the person's messages to the run (``AgentTurns.hear``); a bare call
    does not."""
    spec = agents.AGENTS[agent_name]
    tool = spec.tool
    if tool is None:
        raise ValueError(f"The {agent_name} answers in an editing conversation, not with a tool.")
    root = instructions_from if instructions_from is not None else worktree
    recall = Recall() if bare else recall_for_phase(run, agent_name)
    system = spec.system_prompt("") if bare else agent_system_prompt(run, agent_name, root, recall=recall)
    # A bare call was given nothing to recall: it records nothing (the panel leaves it out).
    turns = AgentTurns(run, lease, agent_name, recalled={} if bare else recall.record())
    explore: tuple[Tool, ...] = ()
    if worktree is not None and turns.provider.supports_tools:
        from repos.tools import REPO_TOOLS

        explore = tuple(REPO_TOOLS)
    answer_limit = min(limit for limit in (run.max_tokens, max_tokens) if limit) if max_tokens else run.max_tokens
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    # A long exploration's old tool results cleared (llm/context_editing.py).
    context_editing = context_editing_configured() if explore else None
    problems: list[str] = []
    explored = tokens = asked = 0
    for attempt in (1, 2):
        while True:
            out_of_turns = explored >= settings.AGENT_TOOL_MAX_TURNS or tokens >= settings.AGENT_TOOL_TOKEN_LIMIT
            if not bare:
                # A person's messages to the run, read now: in this call's question.
                messages = turns.hear(messages, turn=asked)
            asked += 1
            request = LLMRequest(
                system=system,
                messages=messages,
                model=run.model_for(agent_name),
                max_tokens=answer_limit,
                tool=tool,
                explore_tools=explore,
                force_answer=bool(explore) and out_of_turns,
                context_editing=context_editing,
            )
            # Its text is streamed into the log and shown nowhere else: its lessons are
            # kept (by take), there is nothing to strip.
            turn = turns.take(request, attempt=attempt)
            result = turn.result
            tokens += result.all_input_tokens + result.output_tokens
            explorations = [call for call in result.tool_calls if call.name != tool.name]
            answered = len(explorations) < len(result.tool_calls)
            if not explore or request.force_answer or answered or not explorations:
                break
            assert worktree is not None
            turns.record(turn)
            explored += 1
            tool_results = _run_repo_tools(worktree, explorations, turns.log)
            messages = [
                *messages,
                {"role": "assistant", "content": result.content},
                {"role": "user", "content": tool_results},
            ]
        # Stripped before it is checked and recorded: the plan or the findings are stored
        # and shown without markers, and a field that held only a marker is empty.
        result.tool_input = turns.memories.take_answer(result.tool_input, reused=turn.reused)
        problems = spec.validate(result.tool_input)
        turns.record(turn, problems=problems)
        if not problems:
            return result.tool_input or {}
        turns.log.write(f"\n[{tool.name} input was invalid: {'; '.join(problems[:3])}]\n")
        turns.log.flush()
        correction = (
            f"Your previous call to {tool.name} was invalid:\n- "
            + "\n- ".join(problems)
            + f"\nCall {tool.name} again with input that fixes every problem."
        )
        if explore:
            # Keep what the agent has read: answer its call with the errors and force a
            # new answer.
            messages = [*messages, *_correction_turn(result, correction)]
            explored = settings.AGENT_TOOL_MAX_TURNS
        else:
            # Asked once: its one question is the prompt, with the messages it read.
            messages = [{"role": "user", "content": messages[0]["content"] + "\n\n" + correction}]
    raise InvalidAgentOutput(
        f"The {agent_name} gave invalid output twice, so the run stopped. Last problems: {'; '.join(problems[:3])}"
    )


def _run_repo_tools(worktree: Path, calls: list[ToolCall], log: AgentLogStream) -> list[dict[str, Any]]:
    """Execute the agent's read-only tool calls; their results for the next turn."""
    from repos.tools import execute_repo_tool

    results = []
    for call in calls:
        if call.input is None:
            text, is_error = f"The input of {call.name} was not valid JSON.", True
        else:
            output = execute_repo_tool(
                worktree=worktree, name=call.name, tool_input=call.input, max_chars=settings.AGENT_TOOL_OUTPUT_MAX_CHARS
            )
            text, is_error = output.text, output.is_error
        arguments = json.dumps(call.input or {}, ensure_ascii=False)[:200]
        outcome = f"error: {text.splitlines()[0][:200]}" if is_error and text else f"{text.count(chr(10)) + 1} lines"
        log.write(f"\n→ {call.name} {arguments} · {outcome}\n")
        results.append(
            {"type": "tool_result", "tool_use_id": call.id, "content": text or "(empty)", "is_error": is_error}
        )
    log.flush()
    return results


def _correction_turn(result: LLMResult, correction: str) -> list[dict[str, Any]]:
    """The messages that tell the agent its answer was invalid, continuing its
    conversation: every tool call of its reply needs a result."""
    if not result.tool_calls:
        content = result.content or [{"type": "text", "text": "(no answer)"}]
        return [{"role": "assistant", "content": content}, {"role": "user", "content": correction}]
    tool_results = [
        {"type": "tool_result", "tool_use_id": call.id, "content": correction, "is_error": True}
        for call in result.tool_calls
    ]
    return [{"role": "assistant", "content": result.content}, {"role": "user", "content": tool_results}]
