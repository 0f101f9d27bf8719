"""The scripted demo model: a local server speaking the Anthropic Messages API.

``make demo`` serves it with ``python -m llm.demo --port N`` and points
``ANTHROPIC_BASE_URL`` at it, so the app runs whole pipelines and chats with no API key.
The tests' fake Anthropic API (tests/fake_anthropic.py) builds on the same server.

Standard library only: it runs without Django and imports nothing from the apps.
"""

from __future__ import annotations

from llm.demo.model import DEMO_MODEL_LABEL, DemoReply, MessagesRequest, TextReply, ToolReply, default_reply
from llm.demo.server import DemoHandler, DemoModelServer

__all__ = [
    "DEMO_MODEL_LABEL",
    "DemoHandler",
    "DemoModelServer",
    "DemoReply",
    "MessagesRequest",
    "TextReply",
    "ToolReply",
    "default_reply",
]
