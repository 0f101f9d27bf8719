"""The torch-free all-MiniLM-L6-v2 matches sentence-transformers' own vectors.

memory/tests/data/minilm_reference.json was computed once with sentence-transformers
6.2.0 on torch 2.13.0 (CPU), normalize_embeddings=True, in a scratch environment: see
its "generated_by".
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np

from memory.embeddings import (
    DIMENSIONS,
    EMBEDDING_MODEL,
    embed_text,
    embed_texts,
    get_embedder,
    vector_from_bytes,
    vector_to_bytes,
)

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


def test_matches_the_reference_vectors() -> None:
    reference = json.loads(REFERENCE.read_text())
    assert reference["model"] == EMBEDDING_MODEL
    texts = [item["text"] for item in reference["items"]]
    expected = np.array([item["vector"] for item in reference["items"]], dtype=np.float64)
    # Short, empty, longer than 256 tokens (truncated), German, Japanese, Russian, Arabic.
    assert len(texts) >= 12
    assert any(len(get_embedder().tokenizer.encode(t).ids) == 256 for t in texts)  # type: ignore[attr-defined]

    got = embed_texts(texts).astype(np.float64)

    cosine = (got * expected).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1))
    assert cosine.min() >= 0.99999
    assert np.abs(got - expected).max() < 1e-5


def test_vectors_are_unit_length_float32() -> None:
    vectors = embed_texts(["one", "two words", ""])
    assert vectors.dtype == np.float32
    assert vectors.shape == (3, DIMENSIONS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embed_texts([]).shape == (0, DIMENSIONS)


def test_batching_does_not_change_a_vector() -> None:
    alone = embed_text("The deploy runs every night at two.")
    together = embed_texts(["short", "The deploy runs every night at two.", "a much longer sentence " * 20])[1]
    assert np.allclose(alone, together, atol=1e-6)


def test_paraphrases_are_closer_than_unrelated_text() -> None:
    a, b, c = embed_texts(
        ["The car would not start this morning.", "My automobile failed to ignite today.", "I bake bread."]
    )
    assert float(a @ b) > float(a @ c) + 0.2


def test_bytes_round_trip() -> None:
    vector = embed_text("round trip")
    assert np.array_equal(vector_from_bytes(memoryview(vector_to_bytes(vector))), vector)


def test_one_model_per_process_even_under_concurrency() -> None:
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(get_embedder())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(e is seen[0] for e in seen)
