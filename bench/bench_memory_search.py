"""Memory search over N memories (default 100,000): p50/p99 latency of the project's
search path (SemanticIndex.sync + NumpyVectorStore.search, and memory_search end to
end) and recall@10, against exact brute-force numpy search over the same matrix.

Vectors: ~2,000 real sentences (from templates) are embedded with the project's MiniLM;
the other memories are normalised small perturbations of those vectors.

Run: .venv/bin/python bench/bench_memory_search.py [--db sqlite|postgres] [--n 100000]
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import random
import time
from datetime import timedelta

import numpy as np
from _common import p50, parser, pct, setup_django, table

SUBJECTS = ["The planner", "The coder", "The reviewer", "The user", "The test suite", "The CI job", "The API", "Redis"]
VERBS = ["prefers", "rejected", "needs", "broke", "fixed", "documented", "cached", "renamed", "timed out on", "retried"]
OBJECTS = [
    "the login form",
    "the kanban board",
    "database migrations",
    "the websocket consumer",
    "pagination of tasks",
    "the payment webhook",
    "type hints in services",
    "the markdown renderer",
    "password resets",
    "the memory decay job",
    "gzip compression",
    "the search index",
    "CSV exports",
    "rate limiting",
    "the Celery beat schedule",
    "dark mode styles",
]
CONTEXTS = ["in project Alpha", "on Mondays", "after the last deploy", "for large files", "under load", "in tests"]


def sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    combos = list(itertools.product(SUBJECTS, VERBS, OBJECTS, CONTEXTS))
    rng.shuffle(combos)
    return [f"{s} {v} {o} {c}." for s, v, o, c in combos[:count]]


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=100_000, help="memories")
    p.add_argument("--base", type=int, default=2_000, help="real sentences embedded")
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--sample", type=int, default=20, help="queries timed through sync")
    p.add_argument("--noise", type=float, default=0.02, help="per-dimension sigma of the perturbation")
    args = p.parse_args()
    label = setup_django("memory-search", args.db)

    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from accounts.models import User
    from memory.embeddings import EMBEDDING_MODEL, embed_texts, vector_to_bytes
    from memory.models.semantic import DecayPolicy, Memory
    from memory.selectors.semantic import memory_search
    from memory.vector_store import CandidateFilter, SemanticIndex

    user = User.objects.create_user(email="bench@example.com", password="bench-password-123")
    rng = np.random.default_rng(0)

    t0 = time.perf_counter()
    base_texts = sentences(args.base, seed=1)
    base = embed_texts(base_texts).astype(np.float32)
    embed_s = time.perf_counter() - t0

    n = args.n
    src = np.arange(n) % len(base)
    matrix = base[src] + rng.normal(0, args.noise, size=(n, base.shape[1])).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix[: len(base)] = base

    t0 = time.perf_counter()
    now = timezone.now()
    batch = 2000
    for start in range(0, n, batch):
        Memory.objects.bulk_create(
            [
                Memory(
                    owner=user,
                    content=f"{base_texts[src[i]]} (#{i})",
                    content_hash=hashlib.sha256(f"{base_texts[src[i]]} (#{i})".encode()).hexdigest(),
                    memory_type="note",
                    decay_policy=DecayPolicy.PERMANENT,
                    created_at=now,
                    last_reinforced_at=now,
                    embedding=vector_to_bytes(matrix[i]),
                    embedding_model=EMBEDDING_MODEL,
                )
                for i in range(start, min(n, start + batch))
            ]
        )
    insert_s = time.perf_counter() - t0
    ids = np.array(Memory.objects.order_by("id").values_list("id", flat=True))

    # Query sentences the memories do not hold verbatim.
    query_texts = [
        f"What do we know about {o} {c}?"
        for o, c in itertools.islice(itertools.cycle(itertools.product(OBJECTS, CONTEXTS)), args.queries)
    ]
    t0 = time.perf_counter()
    queries = embed_texts(query_texts).astype(np.float32)
    query_embed_ms = (time.perf_counter() - t0) / len(queries) * 1000
    filt = CandidateFilter(now_ts=time.time(), owner_id=user.pk)

    # Rows written less than a minute ago fall in the sync overlap window (SYNC_OVERLAP):
    # every search re-reads them. Measured on a few queries, then the rows are aged.
    index = SemanticIndex()
    t0 = time.perf_counter()
    index.sync()
    cold_sync_s = time.perf_counter() - t0
    fresh = [time.perf_counter()]
    for q in queries[:1]:
        index.search(q, 10, filt)
        fresh.append(time.perf_counter())
    fresh_ms = p50(np.diff(fresh).tolist()) * 1000

    # Age the rows as if written over the past hours, one batch a minute: a sync then
    # re-reads only the newest minute's rows (those within SYNC_OVERLAP of the newest).
    for k, start in enumerate(range(0, n, batch)):
        Memory.objects.filter(pk__in=ids[start : start + batch].tolist()).update(
            updated_at=now - timedelta(hours=1, minutes=k)
        )
    index = SemanticIndex()
    index.sync()

    def brute(q: np.ndarray) -> np.ndarray:
        sims = matrix @ q
        top = np.argpartition(-sims, 10)[:10]
        return ids[top[np.argsort(-sims[top])]]

    truth, t_brute = [], []
    for q in queries:
        t = time.perf_counter()
        truth.append(brute(q))
        t_brute.append(time.perf_counter() - t)

    # The store answers every query; the synced path and memory_search() take a sample,
    # to keep the run short.
    got, t_store = [], []
    for q in queries:
        t = time.perf_counter()
        hits = index.store.search(q, 10, filt)
        t_store.append(time.perf_counter() - t)
        got.append([h.memory_id for h in hits])

    with CaptureQueriesContext(connection) as ctx:
        index.search(queries[0], 10, filt)
    sync_queries = len(ctx.captured_queries)
    sample = min(args.sample, len(queries))
    t_index, sync_recall = [], []
    for q, want in zip(queries[:sample], truth[:sample], strict=True):
        t = time.perf_counter()
        hits = index.search(q, 10, filt)
        t_index.append(time.perf_counter() - t)
        sync_recall.append(len({h.memory_id for h in hits} & set(want.tolist())) / 10)

    # The recount of live rows (rows deleted outright), made at most every
    # MEMORY_INDEX_RECOUNT_SECONDS by a search; it reads every live row.
    t_recount = []
    for _ in range(sample):
        t = time.perf_counter()
        index.sync(recount=True)
        t_recount.append(time.perf_counter() - t)

    # The whole selector: embed the text, sync, search, load rows (process-wide index).
    memory_search(user=user, query=query_texts[0])
    t_full = []
    full_n = min(args.sample, len(query_texts))
    for text in query_texts[:full_n]:
        t = time.perf_counter()
        memory_search(user=user, query=text)
        t_full.append(time.perf_counter() - t)

    recall = float(np.mean([len(set(g) & set(t.tolist())) / 10 for g, t in zip(got, truth, strict=True)]))
    base_p50 = p50(t_brute)
    chroma = chroma_measure(matrix, ids, queries, truth)

    def row(name: str, samples: list[float], rec: str) -> tuple[object, ...]:
        return (
            name,
            len(samples),
            p50(samples) * 1000,
            pct(samples, 99) * 1000,
            rec,
            f"{p50(samples) / base_p50:.1f}x",
        )

    rows = [
        row("baseline: numpy brute force (matrix @ q, argpartition)", t_brute, "1.000"),
        row("NumpyVectorStore.search only (filter + confidence + rank)", t_store, f"{recall:.3f}"),
        row(
            f"SemanticIndex.search (sync: {sync_queries} {'query' if sync_queries == 1 else 'queries'} + search)",
            t_index,
            f"{np.mean(sync_recall):.3f}",
        ),
        row("memory_search() end to end (embed + sync + search + rows)", t_full, "-"),
        row(
            f"SemanticIndex.sync(recount=True) (at most every {settings.MEMORY_INDEX_RECOUNT_SECONDS} s)",
            t_recount,
            "-",
        ),
    ]
    if isinstance(chroma, tuple):
        t_chroma, chroma_recall, chroma_note = chroma
        rows.append(row("ChromaDB query (in-process, HNSW cosine, same vectors)", t_chroma, f"{chroma_recall:.3f}"))
    else:
        chroma_note = chroma
    table(
        f"Memory search, {n:,} memories ({label})",
        ["path", "queries", "p50 ms", "p99 ms", "recall@10", "p50 vs baseline"],
        rows,
        [
            f"Vectors: {len(base):,} real template sentences embedded with MiniLM ({embed_s:.1f} s); the other "
            f"{n - len(base):,} are normalised perturbations of them (sigma {args.noise} per dimension).",
            f"Bulk insert {insert_s:.1f} s; cold index build (first sync) {cold_sync_s:.1f} s; "
            f"query embedding {query_embed_ms:.1f} ms each.",
            f"Right after the bulk insert every row is inside the 60 s sync overlap, so each search re-reads "
            f"them all: {fresh_ms:,.0f} ms for one query. The table is measured with rows aged as if "
            f"written {batch:,} a minute, so a sync re-reads the newest {batch:,}.",
            "recall@10 of the store is over all queries; the synced path and memory_search() time "
            f"{sample} queries each. All memories are permanent (confidence 1), so the project's score "
            "equals cosine similarity.",
            chroma_note,
        ],
    )


def chroma_measure(
    matrix: np.ndarray, ids: np.ndarray, queries: np.ndarray, truth: list[np.ndarray]
) -> tuple[list[float], float, str] | str:
    """ChromaDB on the same vectors and queries: per-query latency, recall@10 and a note;
    or, when chromadb is not installed, the note alone. Embeddings are passed in, so no
    embedding model is loaded or downloaded; the ids are the memories' ids."""
    try:
        import chromadb
    except ImportError:
        return "ChromaDB: not measured (chromadb is not installed: pip install -r requirements-bench.txt)."
    client = chromadb.EphemeralClient()
    with contextlib.suppress(Exception):
        client.delete_collection("bench-memories")
    collection = client.create_collection("bench-memories", metadata={"hnsw:space": "cosine"}, embedding_function=None)
    t0 = time.perf_counter()
    batch = min(5_000, client.get_max_batch_size())
    for start in range(0, len(matrix), batch):
        collection.add(ids=[str(i) for i in ids[start : start + batch]], embeddings=matrix[start : start + batch])
    build_s = time.perf_counter() - t0
    samples, recalls = [], []
    collection.query(query_embeddings=queries[:1], n_results=10, include=[])  # warm-up
    for q, want in zip(queries, truth, strict=True):
        t = time.perf_counter()
        found = collection.query(query_embeddings=q[None, :], n_results=10, include=[])["ids"][0]
        samples.append(time.perf_counter() - t)
        recalls.append(len({int(i) for i in found} & set(want.tolist())) / 10)
    note = (
        f"ChromaDB {chromadb.__version__}: chromadb.EphemeralClient() in this process, one collection, HNSW "
        f"space cosine with default parameters, embeddings passed in (no embedding model); adding the "
        f"{len(matrix):,} vectors in batches of {batch:,} took {build_s:.1f} s. Its latency includes the "
        "client's Python/Rust call overhead; it does no owner/decay filtering or confidence weighting."
    )
    return samples, float(np.mean(recalls)), note


if __name__ == "__main__":
    main()
