"""Secret values taken out of command output before it is streamed, stored or shown.

A project's secret variables reach its test command (repos/variables.py); whatever
that command prints goes to run events, the stored verify result, findings, the
Coder's tool results and its prompts. :class:`OutputMasker` replaces every occurrence
of a secret value with :data:`MASK`, in a whole text (``mask``) or in a stream of
chunks (``stream``): a value split between two chunks is still caught, because the
stream holds back the last ``len(longest secret) - 1`` characters until the next chunk
or the end.

Overlapping occurrences (``abcd`` and ``cdef`` in ``abcdef``) are masked as their
union, so that no part of either is left. Values shorter than
:data:`MIN_SECRET_LENGTH` are not masked: masking ``a`` or ``42`` would blank half of
any output and tell a reader the value anyway; the variables' service refuses such
secrets.

Pure: no Django models, so every layer that handles output can use it.
"""

from __future__ import annotations

from collections.abc import Iterable

MASK = "••••••"
MIN_SECRET_LENGTH = 4
# A stream holds back at most this much behind a run of overlapping occurrences
# (output like ``aaaa…`` with a secret ``aaaa``): past it, what is masked goes out.
MAX_HELD_CHARS = 65536


class OutputMasker:
    """Masks the given secret values (those of at least MIN_SECRET_LENGTH characters)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: tuple[str, ...] = tuple(
            sorted({value for value in secrets if len(value) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        )
        self.held_back = len(self.secrets[0]) - 1 if self.secrets else 0

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def mask(self, text: str) -> str:
        """``text`` with every occurrence of every secret replaced by MASK."""
        if not self.secrets or not text:
            return text
        return _render(text, self._covered(text))

    def stream(self) -> MaskingStream:
        """A stream for one command's output: ``write`` each chunk, ``finish`` at the end."""
        return MaskingStream(self)

    def _covered(self, text: str) -> list[tuple[int, int]]:
        """The merged [start, end) spans of ``text`` that any secret's occurrence covers."""
        spans: list[tuple[int, int]] = []
        for secret in self.secrets:
            found = text.find(secret)
            while found != -1:
                spans.append((found, found + len(secret)))
                found = text.find(secret, found + 1)  # overlapping occurrences too
        spans.sort()
        merged: list[tuple[int, int]] = []
        for start, end in spans:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged


class MaskingStream:
    """One output stream through a masker. ``write`` returns what may go out now;
    ``finish`` returns what was held back. The pieces joined equal ``mask`` of the
    whole output."""

    def __init__(self, masker: OutputMasker) -> None:
        self.masker = masker
        self.pending = ""

    def write(self, chunk: str) -> str:
        if not self.masker.secrets:
            return chunk
        text = self.pending + chunk
        spans = self.masker._covered(text)
        # No occurrence that is still incomplete can start before ``cut``: it would
        # need more than held_back characters after it.
        cut = max(0, len(text) - self.masker.held_back)
        for start, end in spans:
            if start < cut < end and len(text) - start <= MAX_HELD_CHARS:
                # An occurrence across the cut could still grow into an overlapping one
                # with the next chunk: hold it back whole.
                cut = start
                break
            if start < cut < end:
                cut = end
                break
        self.pending = text[cut:]
        return _render(text[:cut], [(start, min(end, cut)) for start, end in spans if start < cut])

    def finish(self) -> str:
        text, self.pending = self.pending, ""
        return self.masker.mask(text)


def _render(text: str, spans: list[tuple[int, int]]) -> str:
    pieces: list[str] = []
    position = 0
    for start, end in spans:
        pieces.append(text[position:start])
        pieces.append(MASK)
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


NO_MASKING = OutputMasker()
