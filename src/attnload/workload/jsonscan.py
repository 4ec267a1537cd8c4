"""Streamed scans of JSON files: the elements of a top-level array, or the lines of a JSONL file.

A dataset can be a gigabyte (the public ShareGPT file is ~650 MB) and every worker needs
it, so nothing here reads a file whole: a chunked UTF-8 buffer is decoded element by
element with ``json.JSONDecoder.raw_decode``, and each element is reported with its byte
span and first line, so a reader can seek straight to it later and an error can name its
line. Every malformed input is a one-line :class:`UsageError` naming file, line and fix.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from attnload.errors import UsageError

CHUNK_BYTES = 1 << 20
MAX_ELEMENT_BYTES = 64 << 20
_WHITESPACE = " \t\r\n"


@dataclass(frozen=True)
class Span:
    """Where one element lies in its file: byte offset, byte length, 1-based line of its first byte."""

    start: int
    length: int
    line: int


def read_span(handle: IO[bytes], span: Span) -> Any:
    """Parse one element back from an open binary file (it was validated by the scan)."""
    handle.seek(span.start)
    return json.loads(handle.read(span.length))


def iter_json_lines(path: str | os.PathLike[str], label: str) -> Iterator[tuple[Span, Any]]:
    """Each non-blank line of a JSONL file, parsed; a line that is not JSON stops the scan."""
    with open(path, "rb") as handle:
        offset = 0
        for line_no, raw in enumerate(handle, 1):
            start, offset = offset, offset + len(raw)
            text = raw.strip()
            if not text:
                continue
            try:
                value = json.loads(text)
            except UnicodeDecodeError:
                raise UsageError(f"{label} {path} line {line_no}: not UTF-8 text; save the file as UTF-8") from None
            except json.JSONDecodeError as exc:
                raise UsageError(
                    f"{label} {path} line {line_no}: malformed JSON ({exc.msg} at column "
                    f"{exc.colno}); each line must be one complete JSON object"
                ) from None
            yield Span(start, len(raw), line_no), value


class _Buffer:
    """Decoded text of a file region, with the byte offset and line number of a moving mark.

    Offsets advance incrementally (only the text between the mark and a new index is
    encoded or scanned for newlines), and consumed text is dropped only when a chunk is
    appended, so scanning stays linear in the file size whatever the record size.
    """

    def __init__(self, handle: IO[bytes], path: str | os.PathLike[str], label: str) -> None:
        self.handle, self.path, self.label = handle, path, label
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.pos = 0
        self.mark = 0
        self.mark_byte = 0
        self.mark_line = 1
        self.eof = False

    def more(self, n_bytes: int | None = None) -> bool:
        """Append up to ``n_bytes`` (default a chunk) more, dropping text before ``pos``; False at end of file."""
        if self.eof:
            return False
        raw = self.handle.read(n_bytes or CHUNK_BYTES)
        try:
            decoded = self.decoder.decode(raw, final=not raw)
        except UnicodeDecodeError:
            raise UsageError(
                f"{self.label} {self.path} line {self.locate(len(self.text))[1]}: not UTF-8 text; "
                "save the file as UTF-8"
            ) from None
        self.eof = not raw
        if raw:
            self.locate(self.pos)
            self.text, self.mark, self.pos = self.text[self.pos :] + decoded, 0, 0
        return bool(raw)

    def peek(self) -> str | None:
        """The next non-whitespace character (``pos`` moves onto it), None at end of file."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _WHITESPACE:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return None

    def locate(self, index: int) -> tuple[int, int]:
        """Byte offset and line of ``text[index]``; moves the mark there (indexes only grow)."""
        if index > self.mark:
            self.mark_byte += len(self.text[self.mark : index].encode("utf-8"))
            self.mark_line += self.text.count("\n", self.mark, index)
            self.mark = index
        return self.mark_byte, self.mark_line

    def fail(self, index: int, problem: str, fix: str) -> UsageError:
        line = self.mark_line + self.text.count("\n", self.mark, index)
        return UsageError(f"{self.label} {self.path} line {line}: {problem}; {fix}")

    def decode_element(self, decoder: json.JSONDecoder) -> tuple[Any, int]:
        """Parse the element at ``pos``, reading more while it is cut off by the buffer's end."""
        while True:
            try:
                return decoder.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                too_big = len(self.text) - self.pos > MAX_ELEMENT_BYTES
                if too_big or not self.more(max(CHUNK_BYTES, len(self.text))):
                    raise self.fail(
                        exc.pos, f"malformed JSON ({exc.msg})", "fix the record or re-export the file as valid JSON"
                    ) from None


def iter_array_elements(path: str | os.PathLike[str], label: str) -> Iterator[tuple[Span, Any]]:
    """Each element of a file holding one top-level JSON array, parsed, without loading the file."""
    decoder = json.JSONDecoder()
    with open(path, "rb") as handle:
        buf = _Buffer(handle, path, label)
        first = buf.peek()
        if first == "\ufeff":  # a byte-order mark: skip it (its 3 bytes still count in offsets)
            buf.pos += 1
            first = buf.peek()
        if first != "[":
            raise buf.fail(
                buf.pos,
                f"expected a JSON array ('['), found {first!r}",
                'a ShareGPT file is one array of {"conversations": [...]} objects',
            )
        buf.pos += 1
        expect_comma = False
        while True:
            char = buf.peek()
            if char is None:
                raise buf.fail(
                    buf.pos, "the array never closes (is the file cut short?)", "re-download or re-export it"
                )
            if char == "]":
                buf.pos += 1
                break
            if expect_comma:
                if char != ",":
                    raise buf.fail(buf.pos, f"expected ',' or ']' between records, found {char!r}", "fix the JSON")
                buf.pos += 1
                if buf.peek() is None:
                    raise buf.fail(buf.pos, "the array never closes (is the file cut short?)", "re-download it")
            value, end = buf.decode_element(decoder)
            start, line = buf.locate(buf.pos)
            span = Span(start, buf.locate(end)[0] - start, line)
            buf.pos = end
            expect_comma = True
            yield span, value
        if buf.peek() is not None:
            raise buf.fail(buf.pos, "text after the array's closing ']'", "remove it")
