"""Full-text retrieval for bench_memory_retrieval.py: an in-process BM25 (Okapi) index.

In the process, it ranks the same on SQLite and PostgreSQL; SQLite FTS5's bm25() and
PostgreSQL's ts_rank would rank differently on the two databases. The benchmark did not
choose hybrid retrieval, so this lives here and not in the product.
"""

from __future__ import annotations

import math
import re
from collections import Counter

# Okapi BM25's usual constants.
K1 = 1.2
B = 0.75

_TOKEN = re.compile(r"[^\W_]+")
# Words that say nothing about what a memory is about; task titles are full of them.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "do",
        "does",
        "doing",
        "done",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "let",
        "lets",
        "make",
        "makes",
        "me",
        "more",
        "most",
        "my",
        "no",
        "not",
        "of",
        "on",
        "once",
        "only",
        "or",
        "our",
        "ours",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
    ]
)


def _stem(word: str) -> str:
    """A light suffix strip, enough for "tests"/"test" and "emails"/"email"."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    return [_stem(w) for w in _TOKEN.findall(text.casefold()) if w not in STOPWORDS]


class FullTextIndex:
    """BM25 over the texts of memories, by memory id. Not thread-safe."""

    def __init__(self) -> None:
        self._postings: dict[str, dict[int, int]] = {}
        self._lengths: dict[int, int] = {}
        self._terms: dict[int, tuple[str, ...]] = {}
        self._total_length = 0

    def __len__(self) -> int:
        return len(self._lengths)

    def __contains__(self, memory_id: object) -> bool:
        return memory_id in self._lengths

    def add(self, memory_id: int, text: str) -> None:
        self.remove(memory_id)
        counts = Counter(tokenize(text))
        for term, n in counts.items():
            self._postings.setdefault(term, {})[memory_id] = n
        length = sum(counts.values())
        self._lengths[memory_id] = length
        self._terms[memory_id] = tuple(counts)
        self._total_length += length

    def remove(self, memory_id: int) -> None:
        length = self._lengths.pop(memory_id, None)
        if length is None:
            return
        self._total_length -= length
        for term in self._terms.pop(memory_id):
            postings = self._postings[term]
            del postings[memory_id]
            if not postings:
                del self._postings[term]

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of every memory holding at least one of the query's terms."""
        n = len(self._lengths)
        if n == 0:
            return {}
        average = self._total_length / n or 1.0
        lengths = self._lengths
        out: dict[int, float] = {}
        for term in set(tokenize(query)):
            postings = self._postings.get(term)
            if not postings:
                continue
            idf = math.log(1 + (n - len(postings) + 0.5) / (len(postings) + 0.5))
            for memory_id, tf in postings.items():
                norm = K1 * (1 - B + B * lengths[memory_id] / average)
                out[memory_id] = out.get(memory_id, 0.0) + idf * tf * (K1 + 1) / (tf + norm)
        return out
