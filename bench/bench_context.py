"""Context store (memory.services.context): saves and gets per second of 10 KB JSON,
gzip against none, dedup hits, against plain json+gzip in memory and a raw
``ContextItem.objects.create`` of the same bytes.

Run: .venv/bin/python bench/bench_context.py [--db sqlite|postgres] [--n 300]
"""

from __future__ import annotations

import gzip
import hashlib
import json
import time
import uuid
from collections.abc import Callable

from _common import p50, parser, setup_django, table


def document(i: int) -> dict[str, object]:
    """About 10 KB of canonical JSON, different for every ``i``."""
    files = [
        {
            "path": f"src/module_{i}_{j}.py",
            "content": f"def feature_{j}(x: int) -> int:\n    return x * {i} + {j}\n" * 3,
            "reason": "Implements the subtask as planned, with a test.",
        }
        for j in range(38)
    ]
    return {"run": i, "phase": "coding", "iteration": 1, "output": {"summary": f"Change {i}", "files": files}}


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=300, help="operations per scenario")
    args = p.parse_args()
    label = setup_django("context", args.db)

    from accounts.models import User
    from memory.models import ContextItem
    from memory.services.context import canonical_json, context_decode, context_get, context_save

    user = User.objects.create_user(email="bench@example.com", password="bench-password-123")
    size = len(canonical_json(document(0)))
    n = args.n
    counter = iter(range(10**9))

    def rate(fn: Callable[[int], object]) -> tuple[float, float]:
        fn(next(counter))  # warm-up
        samples = []
        for _ in range(n):
            i = next(counter)
            t = time.perf_counter()
            fn(i)
            samples.append(time.perf_counter() - t)
        return n / sum(samples), p50(samples) * 1e6

    docs: dict[int, dict[str, object]] = {}

    def doc(i: int) -> dict[str, object]:
        return docs.setdefault(i, document(i))

    # Pre-build the documents so that building them is not timed.
    for i in range(8 * (n + 1) + 2):
        doc(i)

    def mem_baseline(i: int) -> bytes:
        raw = json.dumps(doc(i), sort_keys=True, separators=(",", ":")).encode()
        hashlib.sha256(raw).hexdigest()
        return gzip.compress(raw, mtime=0)

    def raw_create(compress: bool) -> Callable[[int], object]:
        def fn(i: int) -> object:
            raw = json.dumps(doc(i), sort_keys=True, separators=(",", ":")).encode()
            return ContextItem.objects.create(
                id=f"ctx_{uuid.uuid4().hex}",
                owner=user,
                type="changes",
                content=gzip.compress(raw, mtime=0) if compress else raw,
                compression="gzip" if compress else "none",
                content_hash=hashlib.sha256(raw).hexdigest(),
                size_bytes=len(raw),
            )

        return fn

    saved: dict[str, list[str]] = {"gzip": [], "none": []}

    def save(compression: str) -> Callable[[int], object]:
        def fn(i: int) -> object:
            item, _created = context_save(owner=user, type="changes", content=doc(i), compression=compression)
            saved[compression].append(item.pk)
            return item

        return fn

    dedup_doc = doc(0)
    context_save(owner=user, type="changes", content=dedup_doc)

    def dedup(i: int) -> object:
        item, created = context_save(owner=user, type="changes", content=dedup_doc)
        if created:
            raise RuntimeError("dedup missed")
        return item

    rows: list[tuple[object, ...]] = []

    def add(name: str, fn: Callable[[int], object], base: float | None) -> float:
        ops, us = rate(fn)
        rows.append((name, n, ops, us, f"{base / ops:.1f}x" if base else "1.0x"))
        return ops

    b_mem = add("baseline: json.dumps + sha256 + gzip.compress (in memory)", mem_baseline, None)
    b_raw = add("baseline: raw ContextItem.objects.create (gzip bytes)", raw_create(True), None)
    add("baseline: raw ContextItem.objects.create (uncompressed)", raw_create(False), None)
    add("context_save, gzip (new content)", save("gzip"), b_raw)
    add("context_save, none (new content)", save("none"), b_raw)
    add("context_save, dedup hit (identical content)", dedup, b_raw)

    ids = {c: saved[c][:] for c in saved}

    def raw_get(i: int) -> object:
        return context_decode(ContextItem.objects.get(pk=ids["gzip"][i % len(ids["gzip"])]))

    def get(compression: str) -> Callable[[int], object]:
        def fn(i: int) -> object:
            pool = ids[compression]
            return context_decode(context_get(user=user, context_id=pool[i % len(pool)]))

        return fn

    b_get = add("baseline: raw ContextItem.objects.get + decode (gzip)", raw_get, None)
    add("context_get + decode, gzip", get("gzip"), b_get)
    add("context_get + decode, none", get("none"), b_get)
    del b_mem

    gz = len(gzip.compress(canonical_json(document(1)), mtime=0))
    table(
        f"Context store, {size / 1024:.1f} KiB JSON per item ({label})",
        ["scenario", "ops", "ops/s", "p50 µs", "slower than baseline"],
        rows,
        [
            f"gzip stores {gz / 1024:.1f} KiB of {size / 1024:.1f} KiB (ratio {size / gz:.1f}).",
            "Saves compare with the raw create of the same bytes; gets with a raw get + decode.",
            "context_get also counts the access (one UPDATE) before its SELECT.",
        ],
    )


if __name__ == "__main__":
    main()
