"""The Coder as a coding agent over ACP (Claude Code, opencode…): one prompt turn, not a loop.

Where the task (or else its project) picks an agent of ``ACP_AGENTS`` as its Coder
(core/coder_agents.py), the coding phase hands it the same system prompt and task as the
built-in Coder (pipelines/agents/coder.py); it runs in its sandbox
(llm/acp/sandbox.py) and everything it does to the worktree comes back to us
over ACP and is answered here, by AutoCoder's own rules, never by asking a person:

- its file reads and writes: repos/editor_whole.py (the editor's rules: inside the
  worktree, no ``.git``, no symbolic link, size limits, the file's encoding kept); a
  written path is kept on the run (``workspace_record_written``) as the built-in
  Coder's are;
- a terminal: exactly the project's test command, run like the built-in Coder's
  ``run_tests`` (repos/coder_tools.py: the Verifying phase's sandboxed runner, its
  limit of runs, secrets masked); any other command is refused;
- ``session/request_permission``: edits inside the worktree and the test command
  allowed, everything else refused (``coder_permission``).

A refusal is the request's error: the agent is told why and goes on. Its updates stream
into the Coder's live log; its reported usage and cost are recorded through
``AgentTurns`` (pipelines/agents/services.py). A cancelled run sends ``session/cancel``.
An agent that exits, is not logged in or breaks the protocol ends the phase with the
provider's error (the driver pauses or fails the run, as for the Claude CLI).
Its replies to line comments are ``[REPLY <comment>: …]`` markers in its final message.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from django.conf import settings

from core.coder_agents import coder_agent_label
from core.crypto import decrypt_secret
from core.exceptions import SandboxUnavailable
from core.sandbox_bwrap import SANDBOX_ROOT
from core.sandbox_probe import sandbox_status
from llm.acp.client import AcpRefused, CommandRun, PermissionAsk
from llm.acp.provider import AcpProvider, acp_agent
from llm.providers.base import LLMRequest
from pipelines.agents import prompts as agents
from pipelines.agents.coder import CoderConversation
from pipelines.agents.conversation import agent_system_prompt
from pipelines.agents.recall import Recall
from pipelines.agents.replies import CommentReplies
from pipelines.agents.turns import AgentTurns, PhaseInterrupted, should_stop, stopped_between_turns
from pipelines.models import PipelineRun
from pipelines.runs.leases import Lease
from pipelines.runs.workspace import repository_test_command, run_test_environment, workspace_record_written
from repos.coder_tools import RUN_TESTS, CoderSession, coder_tool_run
from repos.editor_files import EditorProblem
from repos.editor_whole import editor_read_whole, editor_write_whole, owned_like_the_worktree, worktree_relative
from repos.paths import check_path

EDIT_KINDS = ("edit", "delete", "move")
ONLY_TESTS = "Only the project's test command may run here, exactly: {command}"
NO_TEST_COMMAND = "This project has no test command: no command may run here."
NOT_AN_EDIT_INSIDE = "Refused by policy: {what}. Allowed are edits inside the repository and the test command."


class CoderHost:
    """The answers to one ACP agent's requests in ``worktree`` (llm/acp/client.py ``AcpHost``)."""

    def __init__(self, run: PipelineRun, worktree: Path, *, test_command: str, session: CoderSession) -> None:
        self.run = run
        self.worktree = worktree
        self.roots = (SANDBOX_ROOT, str(worktree))
        self.test_command = test_command
        self.session = session

    def read_text(self, path: str, line: int | None, limit: int | None) -> str:
        try:
            text = editor_read_whole(self.worktree, path, roots=self.roots, line=line, limit=limit)
        except (EditorProblem, OSError) as exc:
            raise AcpRefused(str(exc)) from None
        # A test run may have written the environment into a file.
        return self.session.masker.mask(text)

    def write_text(self, path: str, content: str) -> None:
        try:
            written = editor_write_whole(self.worktree, path, content, roots=self.roots)
            owned_like_the_worktree(self.worktree, written)
        except (EditorProblem, OSError) as exc:
            raise AcpRefused(str(exc)) from None
        workspace_record_written(self.run, [written])

    def run_command(self, command: str, args: list[str]) -> CommandRun:
        line = " ".join([command, *args]).strip()
        if not self.test_command:
            raise AcpRefused(NO_TEST_COMMAND)
        if line != self.test_command:
            raise AcpRefused(ONLY_TESTS.format(command=self.test_command))
        outcome = coder_tool_run(
            self.worktree, RUN_TESTS.name, {}, test_command=self.test_command, session=self.session
        )
        return CommandRun(output=outcome.content, exit_code=1 if outcome.is_error else 0)

    def permit(self, ask: PermissionAsk) -> str | None:
        return coder_permission(ask, roots=self.roots, test_command=self.test_command)


def coder_permission(ask: PermissionAsk, *, roots: tuple[str, ...], test_command: str) -> str | None:
    """The policy for an agent's ``session/request_permission``: None allows, else why
    not. Edits whose every path is inside the worktree (and may be written there) and
    exactly the project's test command; nothing else."""
    if ask.kind == "execute":
        if test_command and ask.command.strip() == test_command:
            return None
        return NOT_AN_EDIT_INSIDE.format(what=f"the command {ask.command or ask.title!r}")
    if ask.kind in EDIT_KINDS and ask.paths:
        for path in ask.paths:
            try:
                relative = worktree_relative(path, roots)
            except EditorProblem as exc:
                return NOT_AN_EDIT_INSIDE.format(what=str(exc))
            problem = check_path(relative) if relative != "." else "the repository's folder itself"
            if problem:
                return NOT_AN_EDIT_INSIDE.format(what=problem)
        return None
    return NOT_AN_EDIT_INSIDE.format(what=f"{ask.kind} ({ask.title or 'no title'})")


def code_with_acp(
    run: PipelineRun,
    lease: Lease,
    prompt: str,
    worktree: Path,
    *,
    recall: Recall,
    comment_ids: Collection[int] = (),
    agent_name: str,
) -> CoderConversation:
    """Let the ACP agent ``agent_name`` edit ``worktree`` in one prompt turn."""
    system = agent_system_prompt(run, agents.CODER, worktree, recall=recall, role=agents.CODER_ACP_EDITING_ROLE)
    test_command = repository_test_command(run).strip()
    sandbox, masker = run_test_environment(run)
    log_holder: list[AgentTurns] = []
    session = CoderSession(
        on_output=lambda text: log_holder[0].log.write(text) if log_holder else None,
        should_cancel=lambda: should_stop(lease),
        project=sandbox,
        masker=masker,
    )
    host = CoderHost(run, worktree, test_command=test_command, session=session)
    provider = AcpProvider(
        agent=acp_agent(agent_name),
        host=host,
        api_key=decrypt_secret(run.api_key_encrypted),
        timeout=settings.ACP_AGENT_TIMEOUT_SECONDS,
        sandboxed=not sandbox_status().disabled,
    )
    # Its edits went with a reset worktree if a worker died: nothing to replay.
    agent_turns = AgentTurns(run, lease, agents.CODER, recalled=recall.record(), reuse=False, provider=provider)
    log_holder.append(agent_turns)
    log = agent_turns.log
    log.write(f"[Coder: {coder_agent_label(agent_name)}, over ACP]\n")
    request = LLMRequest(
        system=system,
        messages=agent_turns.hear([{"role": "user", "content": prompt}], turn=0),
        model=run.model,
        max_tokens=run.max_tokens,
        worktree=str(worktree),
        allowed_commands=(test_command,) if test_command else (),
    )
    if stopped_between_turns(lease):
        raise PhaseInterrupted
    try:
        turn = agent_turns.take(request)
    except SandboxUnavailable as exc:
        log.write(f"\n{exc.message}\n")
        log.flush()
        raise
    agent_turns.record(turn)
    replies = CommentReplies(comment_ids)
    shown = replies.take_markers(turn.shown) if comment_ids else turn.shown
    log.flush()
    steps = len(turn.result.tool_calls)
    return CoderConversation(summary=shown.strip(), out_of_turns=False, turns=steps, replies=replies.by_comment)
