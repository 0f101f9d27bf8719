"""Where in the code a memory came from, and whether that code is still there.

A memory learned from code (a comment on lines of a change, a review finding on a file)
keeps citations: the path, the lines, the cited text and its hash, and the commit they
were read at. Before the memory is given to a run, each citation is checked against the
file as the run's base commit holds it (the caller reads the files; this module only
compares text):

- **holds**: the cited lines read the same where they were;
- **moved**: the same text is elsewhere in the file: the citation follows it;
- **changed**: the text is not there as it was, but lines close to it are (at least
  CHANGED_SIMILARITY alike): the citation is re-anchored to them and takes their text;
- **gone**: the file is gone, or nothing in it is close to the cited text.

A memory all of whose citations are gone is stale (memory.services.semantic). A citation
of a whole file (no lines) holds while the file exists.

Pure functions over text: no database, no git.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

# The cited text kept with a citation (enough to re-anchor it and to show it); the hash
# is always of the whole cited text.
CITED_TEXT_MAX_CHARS = 2000
# A citation of more lines than this is about a region, not lines: only its file is
# checked (re-anchoring a long block line by line would cost more than it tells).
CITED_LINES_MAX = 200
# How alike the best window must be for "changed" rather than "gone".
CHANGED_SIMILARITY = 0.6
# Files longer than this are only checked for the exact text (holds / moved / gone).
FUZZY_MAX_LINES = 5000


class CitationStatus:
    HOLDS = "holds"
    MOVED = "moved"
    CHANGED = "changed"
    GONE = "gone"
    # The base does not contain the commit the citation was read at (a change not merged
    # yet): nothing can be said, the memory is used as it is.
    UNVERIFIED = "unverified"


@dataclass(frozen=True)
class Citation:
    path: str
    # 1-based, inclusive; 0 and 0: the whole file.
    start: int = 0
    end: int = 0
    text: str = ""
    hash: str = ""
    commit: str = ""

    @property
    def whole_file(self) -> bool:
        return self.start <= 0

    @property
    def label(self) -> str:
        """'src/a.py', 'src/a.py line 7' or 'src/a.py lines 7–9'."""
        if self.whole_file:
            return self.path
        if self.start == self.end:
            return f"{self.path} line {self.start}"
        return f"{self.path} lines {self.start}–{self.end}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "start": self.start,
            "end": self.end,
            "text": self.text,
            "hash": self.hash,
            "commit": self.commit,
        }


def _normalised_lines(lines: Iterable[str]) -> list[str]:
    # Trailing whitespace and the line ending do not make code different.
    return [line.rstrip() for line in lines]


def text_hash(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(_normalised_lines(lines)).encode()).hexdigest()


def citation_of_lines(*, path: str, start: int, end: int, file_text: str, commit: str) -> Citation:
    """A citation of lines ``start``–``end`` of ``file_text`` (the file at ``commit``);
    lines past the end are clipped, and a citation of no line in the file, or of more than
    CITED_LINES_MAX lines, cites the whole file."""
    lines = file_text.splitlines()
    start, end = max(1, start), min(end, len(lines))
    if end < start or end - start + 1 > CITED_LINES_MAX:
        return citation_of_file(path=path, commit=commit)
    return _anchored(Citation(path=path, commit=commit), lines, start, end)


def citation_of_quote(*, path: str, start: int, end: int, quote: str, commit: str) -> Citation:
    """A citation of lines whose text the caller already has (a comment's quote)."""
    lines = quote.splitlines()
    if start <= 0 or not lines or len(lines) > CITED_LINES_MAX:
        return citation_of_file(path=path, commit=commit)
    return Citation(
        path=path,
        start=start,
        end=start + len(lines) - 1,
        text="\n".join(_normalised_lines(lines))[:CITED_TEXT_MAX_CHARS],
        hash=text_hash(lines),
        commit=commit,
    )


def citation_of_file(*, path: str, commit: str) -> Citation:
    return Citation(path=path, commit=commit)


def citation_from_dict(value: Mapping[str, Any]) -> Citation | None:
    """A stored citation, or None for something that is not one."""
    path = value.get("path")
    if not isinstance(path, str) or not path:
        return None
    try:
        start, end = int(value.get("start") or 0), int(value.get("end") or 0)
    except (TypeError, ValueError):
        return None
    return Citation(
        path=path,
        start=start,
        end=end,
        text=str(value.get("text") or ""),
        hash=str(value.get("hash") or ""),
        commit=str(value.get("commit") or ""),
    )


def citations_from_json(value: object) -> list[Citation]:
    items = value if isinstance(value, list) else []
    return [citation for item in items if isinstance(item, dict) if (citation := citation_from_dict(item))]


def cited_paths(citations: Iterable[Citation]) -> list[tuple[str, str]]:
    """Each cited path once, with its file name (memory.models.MemoryCitedPath)."""
    return [(path, path.rsplit("/", 1)[-1]) for path in sorted({citation.path for citation in citations})]


def _anchored(citation: Citation, lines: Sequence[str], start: int, end: int) -> Citation:
    cited = lines[start - 1 : end]
    return replace(
        citation,
        start=start,
        end=end,
        text="\n".join(_normalised_lines(cited))[:CITED_TEXT_MAX_CHARS],
        hash=text_hash(cited),
    )


@dataclass(frozen=True)
class CitationCheck:
    status: str
    citation: Citation


def citation_check(citation: Citation, file_text: str | None, *, commit: str) -> CitationCheck:
    """Check ``citation`` against ``file_text`` (its file at ``commit``; None: no such
    file there). A citation that holds, moved or changed comes back anchored at
    ``commit``."""
    if file_text is None:
        return CitationCheck(CitationStatus.GONE, citation)
    if citation.whole_file or not citation.hash:
        return CitationCheck(CitationStatus.HOLDS, replace(citation, commit=commit))
    lines = file_text.splitlines()
    size = citation.end - citation.start + 1
    if (
        lines[citation.start - 1 : citation.end]
        and text_hash(lines[citation.start - 1 : citation.end]) == citation.hash
    ):
        return CitationCheck(CitationStatus.HOLDS, replace(citation, commit=commit))
    exact = [
        first
        for first in range(1, len(lines) - size + 2)
        if text_hash(lines[first - 1 : first - 1 + size]) == citation.hash
    ]
    if exact:
        # The nearest copy of the text to where it was.
        first = min(exact, key=lambda line: (abs(line - citation.start), line))
        moved = replace(citation, start=first, end=first + size - 1, commit=commit)
        return CitationCheck(CitationStatus.MOVED, moved)
    if citation.text and len(lines) <= FUZZY_MAX_LINES:
        best = _closest_window(citation.text, lines, size)
        if best is not None:
            first, last = best
            return CitationCheck(
                CitationStatus.CHANGED, _anchored(replace(citation, commit=commit), lines, first, last)
            )
    return CitationCheck(CitationStatus.GONE, citation)


def _closest_window(text: str, lines: Sequence[str], size: int) -> tuple[int, int] | None:
    """The lines (first, last; 1-based) most like ``text`` — windows of its size, one
    line more and one less, since an edit often adds or removes one — if at least
    CHANGED_SIMILARITY alike."""
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(text)
    best: tuple[float, int, int] | None = None
    for width in sorted({size, size + 1, max(1, size - 1)}):
        for first in range(1, len(lines) - width + 2):
            window = "\n".join(_normalised_lines(lines[first - 1 : first - 1 + width]))
            matcher.set_seq1(window)
            if matcher.real_quick_ratio() < CHANGED_SIMILARITY or matcher.quick_ratio() < CHANGED_SIMILARITY:
                continue
            ratio = matcher.ratio()
            if ratio >= CHANGED_SIMILARITY and (best is None or ratio > best[0]):
                best = (ratio, first, first + width - 1)
    return None if best is None else (best[1], best[2])
