"""Server-sent events split from raw body bytes, without per-chunk string concatenation."""

from __future__ import annotations


class SseSplitter:
    """Cuts an SSE byte stream into the payloads of ``data:`` fields, one per event.

    Accepts LF or CRLF line endings, multi-line data fields and events split across
    reads; ``event: error`` marks the next payload as an error event.
    """

    __slots__ = ("_buffer", "events")

    def __init__(self) -> None:
        self._buffer = b""
        self.events: list[tuple[bytes, bytes]] = []
        """Parsed ``(event type, data)`` pairs not yet consumed."""

    def feed(self, data: bytes) -> None:
        if not self._buffer and data.startswith(b"data: ") and data.find(b"\n") == len(data) - 2 \
                and data.endswith(b"\n\n") and b"\r" not in data:
            self.events.append((b"message", bytes(data[6:-2])))  # one whole one-line event per read: most reads
            return
        buffer = self._buffer + data if self._buffer else bytes(data)
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        start = 0
        events = self.events
        while True:
            end = buffer.find(b"\n\n", start)
            if end < 0:
                break
            if buffer.startswith(b"data: ", start) and buffer.find(b"\n", start, end) < 0:
                events.append((b"message", buffer[start + 6:end]))  # the common case, without a call
            else:
                self._event(buffer[start:end])
            start = end + 2
        self._buffer = buffer[start:] if start < len(buffer) else b""

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

    @property
    def pending(self) -> bytes:
        """Bytes after the last complete event (a stream that ends here ended mid-event)."""
        return self._buffer
