"""A hostile OpenAI-compatible server: every failure mode the client must classify, on demand.

The request's ``model`` picks the mode: a mode name (``"stall"``, ``"auth"``, ...) forces it,
``"cycle"`` takes the next mode of :data:`MODES` in turn, any other id is ``not_found``. The server counts each complete
request it read, per mode, and serves the counts on ``GET /counts`` so a test can check
that the client counted every request exactly once (server count = ok + failed + cancelled).

Raw asyncio streams rather than a framework: resets, half-written chunks and malformed
frames must be written byte for byte. Run it as ``python tests/fakes/hostile_server.py --port N``
or in-process with :class:`HostileServer` (a thread with its own event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

MODES: tuple[str, ...] = (
    "ok",
    "auth",
    "not_found",
    "rate_limited",
    "quota",
    "context_length",
    "server_500",
    "html_503",
    "slow_first_byte",
    "stall",
    "reset",
    "malformed",
    "no_choices",
    "no_done",
    "early_length",
    "error_event",
)
EXPECTED: dict[str, str] = {
    "ok": "ok",
    "auth": "auth",
    "not_found": "not_found",
    "rate_limited": "rate_limited",
    "quota": "quota",
    "context_length": "context_length",
    "server_500": "server",
    "html_503": "server",
    "slow_first_byte": "timeout",
    "stall": "timeout",
    "reset": "connection",
    "malformed": "bad_response",
    "no_choices": "bad_response",
    "no_done": "truncated",
    "early_length": "truncated",
    "error_event": "server",
}
"""The docs/design.md error class each mode must produce (``"ok"`` for success)."""

SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


@dataclass
class Timing:
    """How long the slow modes take; the client's timeouts must be shorter."""

    delay_s: float = 0.02  # every response: keeps a 64-user run from spinning the CPU
    token_s: float = 0.005
    slow_s: float = 3.0  # before the first byte of slow_first_byte
    stall_s: float = 30.0  # stall holds the stream open this long (or until the client leaves)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(payload: object) -> bytes:
    return _chunk(b"data: " + json.dumps(payload).encode() + b"\n\n")


def _delta(content: str | None, finish: str | None = None) -> dict[str, object]:
    delta = {"content": content} if content is not None else {}
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _usage(completion: int) -> dict[str, object]:
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": completion, "total_tokens": 5 + completion},
    }


def _json_response(status: int, reason: str, body: object, extra: str = "") -> bytes:
    raw = json.dumps(body).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n{extra}Content-Length: {len(raw)}\r\n\r\n"
    ).encode() + raw


def _text_response(status: int, reason: str, body: bytes, content_type: str = "text/html") -> bytes:
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class Hostile:
    """The protocol logic, independent of how the event loop is run."""

    def __init__(self, timing: Timing | None = None) -> None:
        self.timing = timing or Timing()
        self.counts: Counter[str] = Counter()
        self._next = 0

    def pick(self, model: str) -> str:
        if model in MODES:
            return model
        if model != "cycle":
            return "not_found"  # like a real provider: an id it does not list
        mode = MODES[self._next % len(MODES)]
        self._next += 1
        return mode

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path = (lines[0].split(" ") + ["", ""])[:2]
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                length = int(headers.get("content-length") or 0)
                try:
                    body = await reader.readexactly(length) if length else b""
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                try:
                    keep = await self._route(method, path.split("?")[0], headers, body, writer)
                    await writer.drain()
                except ConnectionError:
                    return  # the client left first (it timed out or gave up on a broken stream)
                if not keep:
                    return
        except asyncio.CancelledError:
            return  # the server is stopping
        finally:
            writer.close()

    async def _route(
        self, method: str, path: str, headers: dict[str, str], body: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        if method == "GET" and path == "/counts":
            writer.write(_json_response(200, "OK", {"counts": dict(self.counts), "total": sum(self.counts.values())}))
            return True
        if method == "GET" and path == "/health":
            writer.write(_json_response(200, "OK", {"status": "ok"}))
            return True
        if method == "GET" and path in ("/v1/models", "/api/v1/models"):
            data = [{"id": m, "object": "model"} for m in (*MODES, "cycle") if m != "not_found"]
            writer.write(_json_response(200, "OK", {"object": "list", "data": data}))
            return True
        if method != "POST" or path not in ("/v1/chat/completions", "/api/v1/chat/completions"):
            writer.write(_text_response(404, "Not Found", b"<html><head><title>404 Not Found</title></head></html>"))
            return True
        try:
            request = json.loads(body)
            model = str(request.get("model", ""))
            max_tokens = int(request.get("max_tokens") or 16)
        except (ValueError, AttributeError, TypeError):
            writer.write(_json_response(400, "Bad Request", {"error": {"message": "body is not JSON"}}))
            return True
        mode = self.pick(model)
        self.counts[mode] += 1
        await asyncio.sleep(self.timing.delay_s)
        return await getattr(self, "_" + mode)(writer, max_tokens, headers.get("authorization", ""))

    # ------------------------------------------------------------------ modes (return: keep the connection)

    async def _stream(self, writer: asyncio.StreamWriter, tokens: int, finish: str, done: bool = True) -> None:
        writer.write(
            SSE_HEAD + _event({"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        )
        for i in range(tokens):
            writer.write(_event(_delta("tok ", finish if i == tokens - 1 else None)))
            await writer.drain()
            await asyncio.sleep(self.timing.token_s)
        writer.write(_event(_usage(tokens)))
        if done:
            writer.write(_chunk(b"data: [DONE]\n\n"))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _ok(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        await self._stream(writer, min(max_tokens, 4), "stop")
        return True

    async def _auth(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        # Real gateways echo the rejected key; the client must redact it everywhere.
        key = auth.removeprefix("Bearer ").strip()
        writer.write(
            _json_response(
                401,
                "Unauthorized",
                {
                    "error": {
                        "message": f"Incorrect API key provided: {key}",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            )
        )
        return True

    async def _not_found(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        writer.write(
            _json_response(
                404,
                "Not Found",
                {
                    "error": {
                        "message": "The model `not_found` does not exist",
                        "type": "invalid_request_error",
                        "code": "model_not_found",
                    }
                },
            )
        )
        return True

    async def _rate_limited(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        writer.write(
            _json_response(
                429,
                "Too Many Requests",
                {
                    "error": {
                        "message": "Rate limit reached for requests",
                        "type": "requests",
                        "code": "rate_limit_exceeded",
                    }
                },
                extra="Retry-After: 1\r\n",
            )
        )
        return True

    async def _quota(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        writer.write(
            _json_response(
                402,
                "Payment Required",
                {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota"}},
            )
        )
        return True

    async def _context_length(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        writer.write(
            _json_response(
                400,
                "Bad Request",
                {
                    "error": {
                        "message": "This model's maximum context length is 8192 tokens",
                        "type": "invalid_request_error",
                        "code": "context_length_exceeded",
                    }
                },
            )
        )
        return True

    async def _server_500(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        writer.write(_json_response(500, "Internal Server Error", {"detail": "Internal Server Error"}))
        return True

    async def _html_503(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        page = b"<html><head><title>503 Service Temporarily Unavailable</title></head><body>nginx</body></html>"
        writer.write(_text_response(503, "Service Unavailable", page))
        return True

    async def _slow_first_byte(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        await asyncio.sleep(self.timing.slow_s)
        if writer.is_closing():
            return False
        await self._stream(writer, min(max_tokens, 4), "stop")
        return True

    async def _stall(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        writer.write(SSE_HEAD + _event(_delta("tok ")))
        await writer.drain()
        await asyncio.sleep(self.timing.stall_s)  # the client's idle timeout fires first and it leaves
        return False

    async def _reset(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        writer.write(SSE_HEAD + _event(_delta("tok ")))
        await writer.drain()
        await asyncio.sleep(0.01)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        writer.transport.abort()
        return False

    async def _malformed(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        writer.write(SSE_HEAD + _event(_delta("tok ")) + _chunk(b'data: {"choices": [{"delta": {"cont\n\n'))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True

    async def _no_choices(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        writer.write(SSE_HEAD + _event({"id": "x", "object": "chat.completion.chunk", "model": "m"}))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True

    async def _no_done(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        await self._stream(writer, min(max_tokens, 4), "stop", done=False)
        return True

    async def _early_length(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        await self._stream(writer, 1, "length")  # finish_reason length after 1 of max_tokens (> 1)
        return True

    async def _error_event(self, writer: asyncio.StreamWriter, max_tokens: int, auth: str) -> bool:
        error = {"error": {"message": "upstream overloaded", "type": "server_error", "code": 503}}
        writer.write(SSE_HEAD + _event(_delta("tok ")))
        writer.write(_chunk(b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n") + b"0\r\n\r\n")
        return True


class ThreadedServer:
    """Runs an asyncio connection handler on 127.0.0.1 in a daemon thread (for in-process tests)."""

    def __init__(self, handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]) -> None:
        self._handle = handle
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.call_later(0.05, self.loop.stop)

        self.loop.call_soon_threadsafe(close)
        self._thread.join(5)


class HostileServer(ThreadedServer):
    """Runs :class:`Hostile` on 127.0.0.1 in a daemon thread (for in-process tests)."""

    def __init__(self, timing: Timing | None = None) -> None:
        self.hostile = Hostile(timing)
        super().__init__(self.hostile.handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slow-s", type=float, default=Timing.slow_s)
    parser.add_argument("--stall-s", type=float, default=Timing.stall_s)
    parser.add_argument("--delay-s", type=float, default=Timing.delay_s)
    args = parser.parse_args()
    hostile = Hostile(Timing(delay_s=args.delay_s, slow_s=args.slow_s, stall_s=args.stall_s))

    async def serve() -> None:
        server = await asyncio.start_server(hostile.handle, "127.0.0.1", args.port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
