from __future__ import annotations

from channels.layers import InMemoryChannelLayer


class EmbeddedChannelLayer(InMemoryChannelLayer):
    """Placeholder: the Celery helper makes this thread-safe."""
