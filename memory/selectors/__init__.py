"""Reads of agent memory, one module per area."""

from .facts import memory_prompt_context

__all__ = ["memory_prompt_context"]
