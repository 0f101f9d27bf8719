"""Agent memory, split by subdomain (each module owns its tables)."""

from .context import ContextItem
from .facts import Fact, Goal
from .notes import AgentNote, AgentNoteRevision, DailyLogEntry
from .semantic import DecayPolicy, Memory, MemoryCitedPath, MemorySource, MemoryUse, MemoryVectorsVersion

__all__ = [
    "AgentNote",
    "AgentNoteRevision",
    "ContextItem",
    "DailyLogEntry",
    "DecayPolicy",
    "Fact",
    "Goal",
    "Memory",
    "MemoryCitedPath",
    "MemorySource",
    "MemoryUse",
    "MemoryVectorsVersion",
]
