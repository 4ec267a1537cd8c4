"""A runaway OpenAI-compatible server: answers that never end, for the client's read budgets.

The request's ``model`` picks the mode (any other id gets ``endless_line``):

- ``endless_line``: a 200 event stream whose one ``data:`` line never ends (no newline ever);
- ``endless_events``: valid content events for ever, far past ``max_tokens``, never ``[DONE]``;
- ``endless_html``: a 200 ``text/html`` body that never ends;
- ``endless_header``: a status line, then one header line that never ends;
- ``trickle``: one valid event a second for ever (only a wall-clock total timeout ends it).

Each answer is also bounded here (``--limit-s``, 60 s by default), so a client that fails to
stop cannot keep this process busy for ever. ``GET /counts`` serves the requests seen per
mode. Run it as ``python tests/fakes/runaway_server.py --port N`` or in-process with
:class:`RunawayServer` (a thread with its own event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter

from hostile_server import ThreadedServer

MODES: tuple[str, ...] = ("endless_line", "endless_events", "endless_html", "endless_header")
EXPECTED: dict[str, str] = {
    "endless_line": "bad_response",
    "endless_events": "truncated",
    "endless_html": "bad_response",
    "endless_header": "bad_response",
    "trickle": "timeout",
}
"""The docs/design.md error class each mode must produce."""
PIECE = 64 * 1024


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _json_response(body: object) -> bytes:
    raw = json.dumps(body).encode()
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(raw) + raw


_EVENT = (
    b"data: "
    + json.dumps(
        {
            "id": "x",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}],
        }
    ).encode()
    + b"\n\n"
)
_BODIES: dict[str, tuple[bytes, bytes]] = {
    "endless_line": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + _chunk(b'data: {"choices": [{"delta": {"content": "'),
        _chunk(b"x" * PIECE),
    ),
    "endless_events": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        _chunk(_EVENT * (PIECE // len(_EVENT))),
    ),
    "endless_html": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n<html><body>\n",
        b"<p>\x1b[31mnot a chat completion\x1b[0m</p>\n" * (PIECE // 48),
    ),
    "trickle": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        _chunk(_EVENT),
    ),
    "endless_header": (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Padding: ", b"a" * PIECE),
}
"""Per mode: what starts the answer, then the piece written again and again."""


class Runaway:
    """The protocol logic, independent of how the event loop is run."""

    def __init__(self, limit_s: float = 60.0) -> None:
        self.limit_s = limit_s
        self.counts: Counter[str] = Counter()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = (lines[0].split(" ") + ["", ""])[:2]
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            length = int(headers.get("content-length") or 0)
            body = await reader.readexactly(length) if length else b""
            if method == "GET":
                data = [{"id": m, "object": "model"} for m in MODES]
                payload = {"counts": dict(self.counts)} if path == "/counts" else {"object": "list", "data": data}
                writer.write(_json_response(payload))
                await writer.drain()
                return
            try:
                model = str(json.loads(body).get("model", ""))
            except (ValueError, AttributeError):
                model = ""
            mode = model if model in EXPECTED else "endless_line"
            self.counts[mode] += 1
            await self._endless(writer, *_BODIES[mode], pause_s=1.0 if mode == "trickle" else 0.0)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()

    async def _endless(self, writer: asyncio.StreamWriter, start: bytes, piece: bytes, pause_s: float) -> None:
        writer.write(start)
        until = time.monotonic() + self.limit_s
        while time.monotonic() < until:  # bounded here too: a client that never stops cannot pin this
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(pause_s)  # also lets the other connections run


class RunawayServer(ThreadedServer):
    """Runs :class:`Runaway` on 127.0.0.1 in a daemon thread (for in-process tests)."""

    def __init__(self, limit_s: float = 60.0) -> None:
        self.runaway = Runaway(limit_s)
        super().__init__(self.runaway.handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--limit-s", type=float, default=60.0, help="longest answer, server-side")
    args = parser.parse_args()
    runaway = Runaway(args.limit_s)

    async def serve() -> None:
        server = await asyncio.start_server(runaway.handle, "127.0.0.1", args.port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
