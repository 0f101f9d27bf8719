#!/usr/bin/env python3
"""A FAKE ACP agent, for the faults the real agents cannot be made to show on demand.

It speaks ACP (newline-delimited JSON-RPC 2.0 on stdio) as an agent does, standard
library only, so it runs with the sandbox's own /usr/bin/python3. What it does is set by
``FAKE_ACP_MODE``:

- ``script`` (default): on ``session/prompt`` it makes the client requests listed in
  ``FAKE_ACP_SCRIPT`` (JSON: ``[{"method": …, "params": {…}}]``, ``"{session}"`` in a
  string replaced by the session's id), reports each answer back as an
  ``agent_message_chunk`` (``<method> -> ok: …`` or ``<method> -> error: …``: what the
  agent was told), then a plan, a usage update with a cost, and ends the turn with usage;
- ``crash``: exits with status 3 after ``initialize``, a last word on stderr;
- ``garbage``: prints a line that is not JSON-RPC after ``initialize``;
- ``auth``: answers ``session/new`` with ACP's "authentication required" error;
- ``hang``: never answers the prompt until ``session/cancel`` (then ``cancelled``);
- ``deaf``: never answers the prompt, ignores the cancel too.
"""

from __future__ import annotations

import json
import os
import sys
import time

MODE = os.environ.get("FAKE_ACP_MODE", "script")
_next_id = 1000


def send(message: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def read() -> dict | None:
    line = sys.stdin.readline()
    return json.loads(line) if line else None


def update(session: str, body: dict) -> None:
    send({"method": "session/update", "params": {"sessionId": session, "update": body}})


def say(session: str, text: str) -> None:
    update(session, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def request(method: str, params: dict) -> dict:
    """A request to the client; its answer (other messages meanwhile are dropped)."""
    global _next_id
    _next_id += 1
    send({"id": _next_id, "method": method, "params": params})
    while True:
        message = read()
        if message is None:
            sys.exit(0)
        if message.get("id") == _next_id and "method" not in message:
            return message


def substituted(value, session: str):
    if isinstance(value, str):
        return value.replace("{session}", session)
    if isinstance(value, list):
        return [substituted(item, session) for item in value]
    if isinstance(value, dict):
        return {key: substituted(item, session) for key, item in value.items()}
    return value


def run_script(session: str) -> None:
    for step in json.loads(os.environ.get("FAKE_ACP_SCRIPT", "[]")):
        method, params = step["method"], substituted(step.get("params", {}), session)
        if method == "session/update":
            update(session, params)
            continue
        answer = request(method, {"sessionId": session, **params})
        if "error" in answer:
            say(session, f"{method} -> error: {answer['error'].get('message')}\n")
        else:
            say(session, f"{method} -> ok: {json.dumps(answer.get('result'))[:300]}\n")
    update(
        session,
        {
            "sessionUpdate": "plan",
            "entries": [{"content": "Fix add", "priority": "high", "status": "completed"}],
        },
    )
    update(
        session,
        {"sessionUpdate": "usage_update", "used": 900, "size": 200000, "cost": {"amount": 0.0123, "currency": "USD"}},
    )
    say(session, "Fake agent done.")


def main() -> int:
    session = "fake-session-1"
    prompt_id = None
    while (message := read()) is not None:
        method = message.get("method")
        if method == "initialize":
            send(
                {
                    "id": message["id"],
                    "result": {
                        "protocolVersion": 1,
                        "agentCapabilities": {},
                        "agentInfo": {"name": "fake-acp-agent", "version": "0"},
                    },
                }
            )
            if MODE == "crash":
                print("fake agent: something broke inside", file=sys.stderr)
                return 3
            if MODE == "garbage":
                print("Hello! I am not speaking JSON-RPC.", flush=True)
                time.sleep(5)
                return 0
        elif method == "session/new":
            if MODE == "auth":
                send({"id": message["id"], "error": {"code": -32000, "message": "Authentication required"}})
                continue
            send({"id": message["id"], "result": {"sessionId": session}})
        elif method == "session/prompt":
            prompt_id = message["id"]
            if MODE in ("hang", "deaf"):
                say(session, "Working on it, slowly.\n")
                continue
            run_script(session)
            usage = {"totalTokens": 1500, "inputTokens": 1000, "outputTokens": 500}
            send({"id": prompt_id, "result": {"stopReason": "end_turn", "usage": usage}})
        elif method == "session/cancel" and MODE == "hang" and prompt_id is not None:
            send({"id": prompt_id, "result": {"stopReason": "cancelled"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
