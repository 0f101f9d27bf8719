"""AutoCoder as the client of a coding agent over the Agent Client Protocol (ACP: JSON-RPC
2.0 over the agent's stdio, https://agentclientprotocol.com), on the
``agent-client-protocol`` SDK.

``transport.py``: the agent's pipes as the SDK's message transport (a line that is not
JSON-RPC ends the session, said plainly) and the bridge that runs every callback on the
caller's thread; ``client.py``: one prompt turn (initialize, session/new, session/prompt,
session/cancel), the agent's requests answered through an ``AcpHost`` the caller gives
(its files, its one command, its permissions: llm knows no worktree rules), its updates
rendered for the live log; ``sandbox.py``: where the agent runs; ``provider.py``: the
registry (``ACP_AGENTS``) and the provider a Coder calls.
"""
