"""Server-sent events split from raw body bytes, without per-chunk string concatenation.

``SseSplitter`` is the pure-Python reference; ``CompiledSseSplitter`` (client/compiled.py, when
the C extension was built: native/sse.c) gives the same events, pending bytes and budget
failures. ``EventSplitter`` is what both offer the stream and the HTTP parser.
"""

from __future__ import annotations

from typing import Protocol

from attnload.client.budget import MAX_DATALESS_BLOCKS, MAX_EVENT_BYTES
from attnload.errors import ErrorClass, RequestFailed


class EventSplitter(Protocol):
    """What a splitter of either implementation offers: bytes in, ``(event type, data)`` pairs out."""

    events: list[tuple[bytes, bytes]]
    max_event_bytes: int
    max_dataless: int

    def feed(self, data: bytes | bytearray) -> None: ...

    def discard(self) -> None: ...

    @property
    def pending(self) -> bytes: ...


class SseSplitter:
    """Cuts an SSE byte stream into the payloads of ``data:`` fields, one per event.

    Accepts LF or CRLF line endings (a CRLF may straddle reads), multi-line data fields and
    events split across reads; ``event: error`` marks the next payload as an error event.

    Memory is bounded whatever the server sends: the unfinished event's bytes are kept as a
    list of the pieces read (joined once, when the event ends, so an endless line costs
    O(n), not O(n^2) re-copying) and past ``max_event_bytes`` the response is a runaway
    (``bad_response``); so is a stream of more than ``max_dataless`` blocks without data.
    """

    __slots__ = ("_buffer", "_parts", "_parts_size", "_cr", "events", "dropped", "max_event_bytes", "max_dataless")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES, max_dataless: int = MAX_DATALESS_BLOCKS) -> None:
        self._buffer = b""
        """The start of the unfinished event (bytes after the last complete one), CRs normalised."""
        self._parts: list[bytes] = []
        """Later pieces of that same event, kept apart until a blank line ends it."""
        self._parts_size = 0
        self._cr = False
        """The last byte fed was a CR: an LF starting the next read completes that CRLF."""
        self.events: list[tuple[bytes, bytes]] = []
        """Parsed ``(event type, data)`` pairs not yet consumed."""
        self.dropped = 0
        """Blocks that carried no ``data:`` field (comments, pings, or not SSE at all)."""
        self.max_event_bytes = max_event_bytes
        self.max_dataless = max_dataless

    def feed(self, data: bytes | bytearray) -> None:
        if type(data) is not bytes:
            data = bytes(data)  # llhttp hands a bytearray it reuses
        if (
            not self._buffer
            and not self._cr
            and data.startswith(b"data: ")
            and data.find(b"\n") == len(data) - 2
            and data.endswith(b"\n\n")
            and b"\r" not in data
        ):
            self.events.append((b"message", bytes(data[6:-2])))  # one whole one-line event per read: most reads
            return
        if self._cr or b"\r" in data:
            data = self._normalise(data)
        old = self._buffer
        if not old:
            buffer = bytes(data)
        elif self._parts:
            joined = self._more(data)
            if joined is None:
                return
            buffer = joined
        else:
            buffer = old + data  # an event split over two reads: the usual partial read
        start = 0
        events = self.events
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            if buffer.startswith(b"data: ", start) and buffer.find(b"\n", start, end) < 0:
                events.append((b"message", buffer[start + 6 : end]))  # the common case, without a call
            else:
                self._event(buffer[start:end])
            start = end + 2
        if start or not old:  # what is left came from this read alone
            self._buffer = buffer[start:] if start < len(buffer) else b""
        else:
            self._hold(data)  # a third piece of one event: from now on pieces are kept, not re-copied

    def _more(self, data: bytes) -> bytes | None:
        """A further piece of an unfinished event: kept (None) unless it ends the event (then all, joined once)."""
        parts = self._parts
        if b"\n\n" in data or (data[:1] == b"\n" and parts[-1][-1:] == b"\n"):
            self._parts, self._parts_size = [], 0
            return b"".join((self._buffer, *parts, data))
        self._hold(data)
        return None

    def _hold(self, data: bytes) -> None:
        if data:
            self._parts.append(bytes(data))
            self._parts_size += len(data)
            if len(self._buffer) + self._parts_size > self.max_event_bytes:
                self._overflow()

    def _normalise(self, data: bytes) -> bytes:
        if self._cr and data[:1] == b"\n":
            data = data[1:]  # the LF of a CRLF whose CR ended the previous read (already a newline)
        self._cr = data[-1:] == b"\r"
        return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

    def _overflow(self) -> None:
        size = len(self._buffer) + self._parts_size
        self._buffer, self._parts, self._parts_size = b"", [], 0
        raise overflow_error(self.max_event_bytes, size)

    def discard(self) -> None:
        """Forget the parsed events not yet consumed (events after [DONE] are not part of the answer)."""
        self.events.clear()

    def _event(self, block: bytes) -> None:
        if block.startswith(b"data:") and b"\n" not in block:  # the common case: one data line
            self.events.append((b"message", block[6:] if block[5:6] == b" " else block[5:]))
            return
        kind, data = b"message", []
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line.startswith(b"event:"):
                kind = line[6:].strip()
        if data:
            self.events.append((kind, b"\n".join(data)))
            return
        self.dropped += 1
        if self.dropped > self.max_dataless:
            raise dataless_error(self.max_dataless)

    @property
    def pending(self) -> bytes:
        """Bytes after the last complete event (a stream that ends here ended mid-event)."""
        if self._parts:
            self._buffer, self._parts, self._parts_size = b"".join((self._buffer, *self._parts)), [], 0
        return self._buffer


def overflow_error(max_event_bytes: int, size: int) -> RequestFailed:
    return RequestFailed(
        ErrorClass.BAD_RESPONSE,
        f"an SSE event grew past {max_event_bytes} bytes ({size} read) without ending: a runaway or non-SSE stream",
    )


def dataless_error(max_dataless: int) -> RequestFailed:
    return RequestFailed(
        ErrorClass.BAD_RESPONSE,
        f"more than {max_dataless} blocks without a data field: the 200 body is not an event stream",
    )
