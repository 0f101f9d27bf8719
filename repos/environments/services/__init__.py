"""The public actions on environments, by subject:

- ``ready``: a run's environment — which is in force, made ready in its worktree,
  changed with its change, restored again; the sandbox its test command runs in;
- ``preparing``: a kept environment claimed by one worker and prepared (setup run, its
  output kept);
- ``rebuild``: Rebuild from the Repository page, and the worker's side of it;
- ``eviction``: kept environments dropped by age and size;
- ``settings``: the page's setup script and tests' network.

Import from the module. The names below are also exported here because pipelines/ calls
them by this path.
"""

from .preparing import EnvironmentBroken, SetupCancelled
from .ready import (
    commands_sandbox,
    environment_for_change,
    environment_make_ready,
    environment_needed,
    environment_restore_missing,
)

__all__ = [
    "EnvironmentBroken",
    "SetupCancelled",
    "commands_sandbox",
    "environment_for_change",
    "environment_make_ready",
    "environment_needed",
    "environment_restore_missing",
]
