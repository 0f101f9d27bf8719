"""The Messages API's context editing as the demo server (and the tests' fake) models it:
a request with ``context_management`` (the ``context-management-2025-06-27`` beta) and a
``clear_tool_uses_20250919`` edit has its old tool results cleared before the model
reads it and before the prompt cache sees it, by the rule of llm/context_editing.py,
and the response says what was cleared (``context_management.applied_edits``).

What the documentation fixes is modelled as it says: the trigger on input tokens, the
latest ``keep`` tool uses kept, ``exclude_tools`` never cleared, nothing cleared unless
``clear_at_least`` tokens can be, the client keeping the whole conversation (the server
edits each request afresh), and clearing invalidating the cached prefix from the first
cleared result on (the cache is computed on the edited prompt). How much is cleared
once triggered — batches until the prompt is under the trigger again — is this model's
reading; the placeholder's wording is the model's own.
"""

from __future__ import annotations

from typing import Any

from llm.context_editing import API_BETA, API_EDIT_TYPE, ContextEditing, clear_old_tool_results, estimate_tokens
from llm.demo.request import MessagesRequest

PLACEHOLDER = "[Tool result cleared to save context]"
BETA_MISSING = f"context_management needs the beta header anthropic-beta: {API_BETA}."
# Edits the API knows that the demo has nothing to apply to: it never thinks, so clearing
# thinking blocks (which the Claude CLI asks for) leaves its requests as they are.
NOTHING_TO_CLEAR = frozenset({"clear_thinking_20251015"})
EDIT_UNKNOWN = "context_management.edits[{index}]: unknown type {kind!r}."


def apply_context_management(request: MessagesRequest) -> str:
    """Edit ``request`` (its body's messages; the messages as sent kept in
    ``request.received_messages``, the edits in ``request.applied_edits``) as the API
    would; an error message when the request asks for it wrongly, else ''."""
    config = request.body.get("context_management")
    if config is None:
        return ""
    sent = ",".join(value for name, value in request.headers.items() if name.lower() == "anthropic-beta")
    betas = {beta.strip() for beta in sent.split(",")}
    if API_BETA not in betas:
        return BETA_MISSING
    edits = config.get("edits") if isinstance(config, dict) else None
    applied: list[dict[str, Any]] = []
    for index, edit in enumerate(edits if isinstance(edits, list) else []):
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind in NOTHING_TO_CLEAR:
            continue
        if kind != API_EDIT_TYPE or not isinstance(edit, dict):
            return EDIT_UNKNOWN.format(index=index, kind=kind)
        messages = request.messages
        edited, cleared = clear_old_tool_results(
            messages,
            ContextEditing.from_api_edit(edit),
            prompt_tokens=estimate_tokens(request.prompt_text),
            stub=lambda _call: PLACEHOLDER,
            keep_edits=False,
        )
        if cleared is None:
            continue
        if request.received_messages is None:
            request.received_messages = messages
        request.body = {**request.body, "messages": edited}
        applied.append(
            {"type": API_EDIT_TYPE, "cleared_tool_uses": cleared.tool_uses, "cleared_input_tokens": cleared.tokens}
        )
    request.applied_edits = applied
    return ""
