"""Offline sentence embeddings for semantic memories.

One model per process, loaded lazily on first use (thread-safe) and kept: loading takes
a fraction of a second, embedding a short sentence a few milliseconds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from .minilm import MODEL_NAME, MiniLMEmbedder

EMBEDDING_MODEL = MODEL_NAME
DIMENSIONS = 384


class Embedder(Protocol):
    name: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


_lock = threading.Lock()
_embedder: Embedder | None = None


def get_embedder() -> Embedder:
    global _embedder
    if _embedder is None:
        with _lock:
            if _embedder is None:
                _embedder = MiniLMEmbedder()
    return _embedder


def embed_texts(texts: Sequence[str]) -> np.ndarray:
    """Unit-length float32 rows, shape (len(texts), DIMENSIONS)."""
    return get_embedder().embed(texts)


def embed_text(text: str) -> np.ndarray:
    return embed_texts([text])[0]


def vector_to_bytes(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def vector_from_bytes(data: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(bytes(data), dtype="<f4")


__all__ = [
    "DIMENSIONS",
    "EMBEDDING_MODEL",
    "Embedder",
    "embed_text",
    "embed_texts",
    "get_embedder",
    "vector_from_bytes",
    "vector_to_bytes",
]
