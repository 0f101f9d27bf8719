"""The Coder editing a run's worktree through the Claude CLI: one agent run, not a loop.

Where the run's provider runs a coding agent of its own (``edits_worktree``: the Claude
CLI), the Coder is that agent, started in the worktree with the same system prompt and
task as the API Coder (pipelines/agents/coder.py) and only its file tools, plus exactly
the project's test command (llm/providers/claude_cli.py). Its events stream into the
Coder's live log; its result is recorded and costed like any agent call (one call: the
CLI's summed usage and its own cost). Out of turns (``CODER_MAX_TURNS``) is the same
finding as the API loop's. The caller commits what the worktree holds. A resumed phase
runs the CLI again (the worktree was reset): its edits cannot be replayed. Its replies
to a person's line comments are ``[REPLY <comment>: …]`` markers in its summary
(pipelines/agents/replies.py): it has no tool of ours to call.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection
from pathlib import Path

from django.conf import settings

from core.exceptions import SandboxUnavailable
from core.sandbox_bwrap import SANDBOX_ROOT
from llm.providers.base import LLMRequest, ToolCall
from pipelines.agents import prompts as agents
from pipelines.agents.coder import OUT_OF_TURNS, CoderConversation
from pipelines.agents.conversation import agent_system_prompt
from pipelines.agents.recall import Recall
from pipelines.agents.replies import CommentReplies
from pipelines.agents.turns import AgentTurns, PhaseInterrupted, stopped_between_turns
from pipelines.models import PipelineRun
from pipelines.runs.leases import Lease
from pipelines.runs.workspace import repository_test_command, run_test_environment, workspace_record_written

OUT_OF_TURNS_STOP = "error_max_turns"
# The CLI's tools that write a file (2.1.x), and the input naming it.
CLI_WRITING_TOOLS = {"Write": "file_path", "Edit": "file_path"}


def cli_written_path(call: ToolCall, worktree: Path) -> str | None:
    """The path (relative to the worktree) a CLI tool call wrote, or None: not a writing
    tool, or a path outside the worktree. The CLI names files as it sees the worktree:
    ``/workspace/...`` in its sandbox, the worktree's own path where the operator runs
    it unsandboxed, or relative to its working folder."""
    key = CLI_WRITING_TOOLS.get(call.name)
    raw = (call.input or {}).get(key or "", "") if key else ""
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        return None
    for root in (SANDBOX_ROOT, str(worktree)):
        if raw == root or raw.startswith(f"{root.rstrip('/')}/"):
            raw = raw[len(root.rstrip("/")) + 1 :]
            break
    else:
        if raw.startswith("/"):
            return None
    relative = posixpath.normpath(raw)
    if relative in (".", "") or relative.startswith("../") or relative == "..":
        return None
    if ".git" in relative.split("/"):
        return None
    return relative


def cli_written_paths(calls: list[ToolCall], worktree: Path) -> list[str]:
    return [path for path in (cli_written_path(call, worktree) for call in calls) if path]


def code_with_cli(
    run: PipelineRun, lease: Lease, prompt: str, worktree: Path, *, recall: Recall, comment_ids: Collection[int] = ()
) -> CoderConversation:
    """Let the provider's agent edit ``worktree`` until it is done or out of turns;
    ``comment_ids``: the line comments the prompt sends it, which it may reply to."""
    system = agent_system_prompt(run, agents.CODER, worktree, recall=recall, role=agents.CODER_CLI_EDITING_ROLE)
    # Replies bought by a worker that died are not reused: their edits went with the
    # worktree's reset. The phase's entry still groups this call with the phase.
    agent_turns = AgentTurns(run, lease, agents.CODER, recalled=recall.record(), reuse=False)
    log = agent_turns.log
    test_command = repository_test_command(run).strip()
    sandbox, masker = run_test_environment(run)
    # The CLI's agent runs as one call: a person's messages are read as it starts; one
    # sent while it works waits for the Coder's next round.
    request = LLMRequest(
        system=system,
        messages=agent_turns.hear([{"role": "user", "content": prompt}], turn=0),
        model=run.model_for(agents.CODER),
        max_tokens=run.max_tokens,
        worktree=str(worktree),
        allowed_commands=(test_command,) if test_command else (),
        command_variables=sandbox.variables if test_command else (),
        command_secrets=masker.secrets,
        commands_image=sandbox.image if test_command else None,
        max_turns=settings.CODER_MAX_TURNS,
    )
    if stopped_between_turns(lease):
        raise PhaseInterrupted
    try:
        turn = agent_turns.take(request)
    except SandboxUnavailable as exc:
        # Fail closed, as the verify step does: the run pauses saying why.
        log.write(f"\n{exc.message}\n")
        log.flush()
        raise
    agent_turns.record(turn)
    result = turn.result
    # Its writes are in the result's tool calls, so they are kept once it ends: a call
    # that dies half-way is run again from a reset worktree, leaving nothing to know.
    workspace_record_written(run, cli_written_paths(result.tool_calls, worktree))
    # The recorded result keeps its markers; the summary (the commit message, the
    # lineage) does not.
    replies = CommentReplies(comment_ids)
    shown = replies.take_markers(turn.shown) if comment_ids else turn.shown
    turns = int(result.extra.get("num_turns") or 0)
    if result.stop_reason == OUT_OF_TURNS_STOP:
        message = OUT_OF_TURNS.format(what="turns", limit=settings.CODER_MAX_TURNS)
        log.write(f"\n[{message}]\n")
        log.flush()
        finding = {"file": "", "line": None, "severity": "major", "message": message}
        return CoderConversation(
            summary="", out_of_turns=True, turns=turns, finding=finding, replies=replies.by_comment
        )
    log.flush()
    return CoderConversation(summary=shown.strip(), out_of_turns=False, turns=turns, replies=replies.by_comment)
