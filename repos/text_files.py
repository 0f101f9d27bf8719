"""How the Coder's editor reads a text file's bytes (repos/editor.py): which encoding it is
in, how many lines it has and whether they end in CRLF, and some of its lines streamed
without reading the rest into memory. Standard library only.

The encoding is decided by one conservative rule, the same for every command:

- a UTF-8 byte order mark: UTF-8 with a BOM; the rest must be valid UTF-8;
- ``FF FE`` / ``FE FF``: UTF-16 LE / BE with a BOM; the rest must be valid UTF-16;
- no BOM: UTF-8 when every byte of the file decodes as UTF-8, otherwise latin-1
  (ISO-8859-1). Latin-1 rather than cp1252 because it maps each of the 256 bytes to one
  character: any file decodes, and every byte an edit does not touch is written back as
  it was. cp1252 leaves five bytes undefined, so some legacy files could not be read at
  all, or would need a second rule. The price: a cp1252 file's 0x80-0x9F (``€``, curly
  quotes) show as control characters, and ``€`` cannot be written into it.

A NUL byte anywhere (a NUL character, for UTF-16) makes the file binary, refused. UTF-16
without a BOM, UTF-32 and other multi-byte encodings have NUL bytes or are not UTF-8, so
they are refused as binary or read as latin-1 — never guessed at.
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

CHUNK_BYTES = 1 << 20


class TextFileRefused(Exception):
    """The file is not text the editor can read; the message says why, for the model."""


@dataclass(frozen=True)
class Encoding:
    codec: str  # Python's codec for the bytes after the BOM
    bom: bytes
    label: str  # how the model is told

    @property
    def is_plain_utf8(self) -> bool:
        """What ``create`` writes: UTF-8 without a BOM."""
        return self is UTF8

    def encode(self, text: str) -> bytes:
        """The file's bytes for ``text``; ``UnicodeEncodeError`` when it cannot hold a character."""
        return self.bom + text.encode(self.codec)

    def unencodable(self, text: str) -> list[str]:
        """The distinct characters of ``text`` this encoding cannot hold, in order of appearance."""
        found: dict[str, None] = {}
        for character in dict.fromkeys(text):
            try:
                character.encode(self.codec)
            except UnicodeEncodeError:
                found[character] = None
        return list(found)


UTF8 = Encoding("utf-8", b"", "UTF-8")
UTF8_WITH_BOM = Encoding("utf-8", codecs.BOM_UTF8, "UTF-8 with a BOM")
UTF16_LE = Encoding("utf-16-le", codecs.BOM_UTF16_LE, "UTF-16 LE with a BOM")
UTF16_BE = Encoding("utf-16-be", codecs.BOM_UTF16_BE, "UTF-16 BE with a BOM")
LATIN1 = Encoding("latin-1", b"", "latin-1")


@dataclass(frozen=True)
class TextScan:
    encoding: Encoding
    lines: int  # as ``cat -n`` counts them: a final newline ends the last line
    crlf: bool  # every newline is CRLF (and there is at least one)


def _by_bom(head: bytes) -> Encoding | None:
    for encoding in (UTF8_WITH_BOM, UTF16_LE, UTF16_BE):
        if head.startswith(encoding.bom):
            return encoding
    return None


def _count(stream: BinaryIO, encoding: Encoding, shown: str) -> tuple[int, bool]:
    """Decode the rest of ``stream`` chunk by chunk and count its lines."""
    decoder = codecs.getincrementaldecoder(encoding.codec)()
    newlines = crlfs = 0
    previous = ""
    while True:
        chunk = stream.read(CHUNK_BYTES)
        text = decoder.decode(chunk, final=not chunk)
        if "\x00" in text:
            raise TextFileRefused(f"{shown} is a binary file; the editor works on text files only.")
        if text:
            newlines += text.count("\n")
            crlfs += text.count("\r\n") + (previous == "\r" and text[0] == "\n")
            previous = text[-1]
        if not chunk:
            break
    lines = newlines + (previous not in ("", "\n"))
    return lines, newlines > 0 and crlfs == newlines


def text_scan(stream: BinaryIO, shown: str) -> TextScan:
    """The encoding and lines of the file read from ``stream`` (seekable), in constant memory."""
    found = _by_bom(stream.read(4))
    for encoding in [found] if found else [UTF8, LATIN1]:
        stream.seek(len(encoding.bom))
        try:
            lines, crlf = _count(stream, encoding, shown)
        except UnicodeDecodeError as exc:
            if encoding.bom:
                name = encoding.label.removesuffix(" with a BOM")
                raise TextFileRefused(
                    f"{shown} starts with a {name} byte order mark but is not valid in {name} (binary, or damaged); "
                    "the editor cannot change it."
                ) from exc
            continue  # not UTF-8: latin-1, which decodes every byte
        return TextScan(encoding, lines, crlf)
    raise AssertionError("latin-1 decodes every byte")  # pragma: no cover


def text_scan_file(path: Path, shown: str) -> TextScan:
    with path.open("rb") as stream:
        return text_scan(stream, shown)


def text_decode(data: bytes, shown: str) -> tuple[TextScan, str]:
    """A whole file's scan and text (with its newlines as they are)."""
    scan = text_scan(io.BytesIO(data), shown)
    return scan, data[len(scan.encoding.bom) :].decode(scan.encoding.codec)


def text_lines(path: Path, scan: TextScan, first: int, *, max_line_chars: int) -> Generator[tuple[int, str]]:
    """The file's lines from number ``first`` on, numbered, without their newline (CR LF
    for an all-CRLF file), read as they are asked for; a line is cut at ``max_line_chars``
    (the rest of a long line, a minified file's say, is read past, never held)."""
    with path.open("rb") as raw:
        raw.seek(len(scan.encoding.bom))
        # newline="\n": lines end at LF only, and come with their endings untouched.
        with io.TextIOWrapper(raw, encoding=scan.encoding.codec, newline="\n") as text:
            number = 0
            while line := text.readline(max_line_chars + 1):
                number += 1
                rest = line
                while len(rest) > max_line_chars and not rest.endswith("\n"):
                    rest = text.readline(max_line_chars + 1)
                if number < first:
                    continue
                if line.endswith("\n"):
                    line = line[:-1].removesuffix("\r") if scan.crlf else line[:-1]
                yield number, line[:max_line_chars]
