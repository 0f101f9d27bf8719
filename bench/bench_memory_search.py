"""Memory search in the database at 100,000 and 1,000,000 memories: p50/p99 of
``memory_search()`` end to end (query embedding included) and of ``vector_search`` (the
filtered, confidence-weighted query), against the bare query of the same vectors and a
numpy brute force over them in RAM, for a typical user and a heavy one; recall@10
against the exact ranking.

Users: 1,000 typical users share the memories a few heavy users do not hold; heavy
users hold min(100,000, n/2) each (one at 100,000 memories, three at 1,000,000). Every
memory is reinforceable with a clock somewhere in the last 20 days and a half-life of a
week to a month, so confidence weighs in.

Vectors: ~2,000 real sentences (from templates) embedded with the project's MiniLM;
the others are normalised small perturbations of those.

Run: .venv/bin/python bench/bench_memory_search.py [--db sqlite|postgres] [--sizes 100000,1000000]
"""

from __future__ import annotations

import itertools
import random
import struct
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
TYPICAL_USERS = 1_000
HEAVY_SIZE = 100_000
K = 10
CHUNK = 20_000


def sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    combos = list(itertools.product(SUBJECTS, VERBS, OBJECTS, CONTEXTS))
    rng.shuffle(combos)
    return [f"{s} {v} {o} {c}." for s, v, o, c in combos[:count]]


class Corpus:
    """Deterministic vectors, owners and clocks for n memories, made a chunk at a time
    (1,000,000 × 384 float32 is 1.5 GB: never held twice)."""

    def __init__(self, n: int, base: np.ndarray, owners: np.ndarray, noise: float) -> None:
        self.n, self.base, self.owners, self.noise = n, base, owners, noise
        rng = np.random.default_rng(7)
        self.age_hours = rng.uniform(0, 20 * 24, n)
        self.half_life = rng.choice([24 * 7.0, 24 * 14.0, 24 * 30.0], n)

    def vectors(self, start: int, stop: int) -> np.ndarray:
        rng = np.random.default_rng(1_000_003 + start)
        rows = self.base[np.arange(start, stop) % len(self.base)]
        rows = rows + rng.normal(0, self.noise, size=rows.shape).astype(np.float32)
        return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def insert_sqlite(corpus: Corpus, now_iso: str, model: str) -> None:
    from django.db import connection, transaction

    columns = (
        "owner_id, content, content_hash, memory_type, decay_policy, half_life_hours, unpinned_policy, agent, "
        "personality, project_id, is_global, created_at, last_reinforced_at, reinforce_count, is_deleted, "
        "embedding, embedding_model, updated_at, source, source_run_id, source_note, applies_when, citations, "
        "path_scoped, checked_commit, stale_reason, vectors_version"
    )
    sql = f"INSERT INTO memory_memory ({columns}) VALUES ({', '.join(['%s'] * 27)})"
    from datetime import datetime

    now = datetime.fromisoformat(now_iso)
    for start in range(0, corpus.n, CHUNK):
        stop = min(corpus.n, start + CHUNK)
        vectors = corpus.vectors(start, stop)
        rows = []
        for i in range(start, stop):
            clock = (now - timedelta(hours=float(corpus.age_hours[i]))).strftime("%Y-%m-%d %H:%M:%S.%f")
            rows.append(
                (
                    int(corpus.owners[i]), f"memory #{i}", f"{i:064x}", "note", "reinforceable",
                    float(corpus.half_life[i]), "", "", "", None, False, clock, clock, 0, False,
                    vectors[i - start].astype("<f4").tobytes(), model, clock, "person", None, "", "", "[]",
                    False, "", "", 0,
                )
            )  # fmt: skip
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(sql, rows)


def insert_postgres(corpus: Corpus, now_iso: str, model: str) -> None:
    """Binary COPY of (owner, vector, age, half-life) into a staging table, then one
    INSERT … SELECT: text COPY of a million 384-d vectors would be ~4 GB of digits."""
    from django.db import connection

    dim = corpus.base.shape[1]
    row_type = np.dtype(
        [
            ("fields", ">i2"),
            ("owner_len", ">i4"), ("owner", ">i8"),
            ("vec_len", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("vec", ">f4", (dim,)),
            ("age_len", ">i4"), ("age", ">f8"),
            ("half_len", ">i4"), ("half", ">f8"),
        ]
    )  # fmt: skip
    raw = connection.connection  # the psycopg connection under Django's
    with raw.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE staging (owner_id bigint, embedding vector, age_hours float8, half_life float8)"
        )
        with cursor.copy("COPY staging FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.write(b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0))
            for start in range(0, corpus.n, CHUNK):
                stop = min(corpus.n, start + CHUNK)
                rows = np.zeros(stop - start, dtype=row_type)
                rows["fields"], rows["owner_len"], rows["owner"] = 4, 8, corpus.owners[start:stop]
                rows["vec_len"], rows["dim"], rows["vec"] = 4 + 4 * dim, dim, corpus.vectors(start, stop)
                rows["age_len"], rows["age"] = 8, corpus.age_hours[start:stop]
                rows["half_len"], rows["half"] = 8, corpus.half_life[start:stop]
                copy.write(rows.tobytes())
            copy.write(struct.pack(">h", -1))
        cursor.execute(
            """
            INSERT INTO memory_memory (owner_id, content, content_hash, memory_type, decay_policy,
                half_life_hours, unpinned_policy, agent, personality, project_id, is_global, created_at,
                last_reinforced_at, reinforce_count, is_deleted, embedding, embedding_model, updated_at,
                source, source_run_id, source_note, applies_when, citations, path_scoped, checked_commit,
                stale_reason, vectors_version)
            SELECT owner_id, 'memory #' || n, lpad(to_hex(n), 64, '0'), 'note', 'reinforceable', half_life,
                '', '', '', NULL, false, clock, clock, 0, false, embedding, %s, clock, 'person', NULL, '',
                '', '[]', false, '', '', 0
            FROM (SELECT s.*, row_number() OVER () - 1 AS n,
                         %s::timestamptz - age_hours * interval '1 hour' AS clock FROM staging s) AS numbered
            """,
            [model, now_iso],
        )
        cursor.execute("DROP TABLE staging")
        cursor.execute("ANALYZE memory_memory")
    raw.commit()


def measure(n: int, db: str, base: np.ndarray, base_texts: list[str], queries: np.ndarray, query_texts: list[str],
            timed: int, noise: float) -> tuple[list[tuple[object, ...]], list[str]]:  # fmt: skip
    from django.db import connection
    from django.test import override_settings
    from django.utils import timezone

    from accounts.models import User
    from memory.decay import compute_confidence_array
    from memory.embeddings import EMBEDDING_MODEL, embed_text
    from memory.models.fields import vector_text
    from memory.models.semantic import Memory
    from memory.owner_vectors import owner_vectors, owner_vectors_changed, owner_vectors_forget
    from memory.selectors.semantic import memory_search, memory_search_vector
    from memory.vector_query import CandidateFilter
    from memory.vector_store import vector_search

    Memory.objects.all().delete()
    User.objects.all().delete()
    heavy_count = 1 if n < 1_000_000 else 3
    heavy_size = min(HEAVY_SIZE, n // 2)
    users = User.objects.bulk_create(
        [User(email=f"u{i}@bench.example", password="!") for i in range(TYPICAL_USERS + heavy_count)]
    )
    user_ids = np.array([u.pk for u in users], dtype=np.int64)
    heavy_ids = user_ids[TYPICAL_USERS:]
    rng = np.random.default_rng(11)
    owners = np.empty(n, dtype=np.int64)
    heavy_total = heavy_count * heavy_size
    owners[:heavy_total] = np.repeat(heavy_ids, heavy_size)
    owners[heavy_total:] = rng.choice(user_ids[:TYPICAL_USERS], n - heavy_total)
    rng.shuffle(owners)
    corpus = Corpus(n, base, owners, noise)

    now = timezone.now()
    t0 = time.perf_counter()
    (insert_postgres if db == "postgres" else insert_sqlite)(corpus, now.isoformat(), EMBEDDING_MODEL)
    insert_s = time.perf_counter() - t0
    ids = np.array(Memory.objects.order_by("id").values_list("id", flat=True))
    assert len(ids) == n, (len(ids), n)

    # The users measured, and their rows in RAM for the brute force and the truth.
    typical = [int(u) for u in rng.choice(user_ids[:TYPICAL_USERS], 50, replace=False)]
    heavy = int(heavy_ids[0])
    measured = np.array([*typical, heavy], dtype=np.int64)
    # One pass over the corpus, chunk by chunk as it was inserted, keeps the measured
    # users' rows.
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        mine = np.flatnonzero(np.isin(owners[start:stop], measured))
        kept.append((mine + start, corpus.vectors(start, stop)[mine]))
    positions_all = np.concatenate([k[0] for k in kept])
    vectors_all = np.concatenate([k[1] for k in kept])

    def rows_of(owner: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mine = owners[positions_all] == owner
        positions = positions_all[mine]
        start_ts = now.timestamp() - corpus.age_hours[positions] * 3600
        permanent = np.zeros(len(positions), dtype=bool)
        confidence = compute_confidence_array(permanent, start_ts, corpus.half_life[positions], now.timestamp())
        return ids[positions], vectors_all[mine], confidence

    def recall_of(hits: list, truth: list[int]) -> float:
        found = {h.memory_id for h in hits}
        return len(found & set(truth)) / len(truth) if truth else float(not found)

    def exact(owner_rows: tuple[np.ndarray, np.ndarray, np.ndarray], q: np.ndarray) -> list[int]:
        row_ids, vectors, confidence = owner_rows
        similarity = (vectors @ q).astype(np.float64)
        top = np.lexsort((-row_ids, -similarity, -similarity * confidence))[:K]
        return row_ids[top].tolist()

    def bare_query(owner: int, q: np.ndarray) -> list[int]:
        with connection.cursor() as cursor:
            if db == "postgres":
                cursor.execute(
                    "SELECT id FROM memory_memory WHERE owner_id = %s AND NOT is_deleted "
                    "ORDER BY embedding <#> %s::vector LIMIT %s",
                    [owner, vector_text(q), K],
                )
                return [r[0] for r in cursor.fetchall()]
            cursor.execute("SELECT id, embedding FROM memory_memory WHERE owner_id = %s AND NOT is_deleted", [owner])
            fetched = cursor.fetchall()
        if not fetched:
            return []
        matrix = np.frombuffer(b"".join(r[1] for r in fetched), dtype="<f4").reshape(len(fetched), -1)
        similarity = matrix @ q
        top = np.argpartition(-similarity, min(K, len(fetched) - 1))[:K]
        return [fetched[i][0] for i in top[np.argsort(-similarity[top])]]

    rows: list[tuple[object, ...]] = []
    for kind, owner_list, count in (("typical", typical, timed), ("heavy", [heavy], max(5, timed // 4))):
        owner_rows = {owner: rows_of(owner) for owner in owner_list}
        sizes = [len(owner_rows[o][0]) for o in owner_list]
        plan = [(owner_list[i % len(owner_list)], i % len(queries)) for i in range(count)]
        t_brute, t_bare, t_search, t_rows, t_embed, t_full, recall = [], [], [], [], [], [], []
        t_in_db, recall_in_db, t_copy = [], [], []
        # Reading an owner's copy into RAM (the first search after a write of theirs).
        for owner in owner_list[:5]:
            owner_vectors_forget()
            t = time.perf_counter()
            copy = owner_vectors(owner)
            t_copy.append(time.perf_counter() - t)
        in_ram = copy is not None
        # Bringing a copy up to date after one memory of the owner's written (the first
        # search after a write in another process): the rows stamped since are read.
        t_update = []
        for owner in owner_list[:5]:
            owner_vectors(owner)
            written = [int(owner_rows[owner][0][0])]
            for _ in range(5):
                owner_vectors_changed(owner, written)
                t = time.perf_counter()
                owner_vectors(owner)
                t_update.append(time.perf_counter() - t)
        for owner, qi in plan:
            q = queries[qi]
            t = time.perf_counter()
            truth = exact(owner_rows[owner], q)
            t_brute.append(time.perf_counter() - t)
            t = time.perf_counter()
            bare_query(owner, q)
            t_bare.append(time.perf_counter() - t)
            f = CandidateFilter(now_ts=now.timestamp(), owner_id=owner)
            t = time.perf_counter()
            hits = vector_search(q, K, f)
            t_search.append(time.perf_counter() - t)
            recall.append(recall_of(hits, truth))
            # The same search with no copy in RAM: the exact scan in the database.
            with override_settings(MEMORY_VECTORS_IN_RAM_MIN=2**62):
                t = time.perf_counter()
                hits = vector_search(q, K, f)
                t_in_db.append(time.perf_counter() - t)
            recall_in_db.append(recall_of(hits, truth))
            t = time.perf_counter()
            memory_search_vector(user=User(pk=owner), query_vec=q, limit=K, now=now)
            t_rows.append(time.perf_counter() - t)
            t = time.perf_counter()
            embed_text(query_texts[qi])
            t_embed.append(time.perf_counter() - t)
            t = time.perf_counter()
            memory_search(user=User(pk=owner), query=query_texts[qi], limit=K, now=now)
            t_full.append(time.perf_counter() - t)
        base_p50 = p50(t_bare)
        who = f"{kind} (~{int(np.mean(sizes)):,} memories)"

        def row(path: str, samples: list[float], rec: str, who: str = who, base_p50: float = base_p50) -> tuple:
            ratio = f"{p50(samples) / base_p50:.2f}x"
            return (f"{n:,}", who, path, len(samples), p50(samples) * 1000, pct(samples, 99) * 1000, rec, ratio)

        searched = "the copy in RAM + the database on the candidates" if in_ram else "in the database"
        read = "into RAM" if in_ram else "a count only: under the threshold"
        updated = "the rows written since" if in_ram else "a count only"
        bare = "pgvector ORDER BY <#> LIMIT 10" if db == "postgres" else "SELECT the owner's blobs + numpy"
        rows += [
            row("numpy brute force of the same vectors in RAM (exact, with confidence)", t_brute, "1.000"),
            row(f"baseline: bare query ({bare})", t_bare, "-"),
            row("vector_search, exact scan in the database (no copy in RAM)", t_in_db, f"{np.mean(recall_in_db):.3f}"),
            row(f"vector_search ({searched})", t_search, f"{np.mean(recall):.3f}"),
            row(f"reading the owner's copy ({read})", t_copy, "-"),
            row(f"bringing the owner's copy up to date after one memory written ({updated})", t_update, "-"),
            row("memory_search_vector (search + rows: all but the embedding)", t_rows, "-"),
            row("embed_text (the query's embedding alone)", t_embed, "-"),
            row("memory_search() end to end (embed + search + rows)", t_full, "-"),
        ]
    notes = [f"{n:,} memories: inserted in {insert_s:.0f} s; {heavy_count} heavy user(s) of {heavy_size:,}."]
    return rows, notes


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--sizes", default="100000,1000000", help="memory counts, comma-separated")
    p.add_argument("--base", type=int, default=2_000, help="real sentences embedded")
    p.add_argument("--timed", type=int, default=100, help="queries timed per typical-user row (heavy: a quarter)")
    p.add_argument("--noise", type=float, default=0.02, help="per-dimension sigma of the perturbation")
    args = p.parse_args()
    label = setup_django("memory-search", args.db)

    from memory.embeddings import embed_texts

    t0 = time.perf_counter()
    base_texts = sentences(args.base, seed=1)
    base = embed_texts(base_texts).astype(np.float32)
    embed_s = time.perf_counter() - t0
    query_texts = [
        f"What do we know about {o} {c}?" for o, c in itertools.islice(itertools.product(OBJECTS, CONTEXTS), 96)
    ]
    t0 = time.perf_counter()
    queries = embed_texts(query_texts).astype(np.float32)
    query_embed_ms = (time.perf_counter() - t0) / len(queries) * 1000

    rows: list[tuple[object, ...]] = []
    notes = [
        f"Vectors: {len(base):,} template sentences embedded with MiniLM ({embed_s:.1f} s), the rest normalised "
        f"perturbations of them (sigma {args.noise}); query embedding {query_embed_ms:.1f} ms each in a batch "
        "(memory_search embeds one text at a time).",
    ]
    for n in (int(s) for s in args.sizes.split(",")):
        size_rows, size_notes = measure(n, args.db, base, base_texts, queries, query_texts, args.timed, args.noise)
        rows += size_rows
        notes += size_notes
    notes.append(
        "recall@10 is vector_search's against the exact ranking by similarity × confidence worked out in numpy; "
        "the bare query ranks by similarity alone (no confidence), as a lower bound of what the database costs."
    )
    table(
        f"Memory search in the database ({label})",
        ["memories", "user", "path", "queries", "p50 ms", "p99 ms", "recall@10", "p50 vs bare query"],
        rows,
        notes,
    )


if __name__ == "__main__":
    main()
