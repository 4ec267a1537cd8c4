"""A small, fast OpenAI-compatible SSE server that keeps the server-side truth.

Why not the simulator: ``attnload sim`` runs on aiohttp, whose per-write cost would
make the server, not the client, the first thing to saturate on a 2-core machine. This
server is a raw asyncio ``Protocol``: no coroutine per stream, one ``call_at`` timer per
token, pre-encoded chunk bytes and HTTP/1.1 chunked framing (what uvicorn/vLLM send).

Every stream emits its first content token ``ttft_s`` after the request was read, then
one token every ``itl_s``, scheduled from absolute deadlines. The truth is what the
server actually did: TTFT is request-read → first content write, ITL the gap between
consecutive content writes, both in attnload's ``LogHistogram`` (the same buckets the
client records into, so percentiles compare bucket for bucket).

``--ttft-per-kprompt-ms K`` adds K ms of TTFT per 1,000 prompt tokens (each request its own TTFT,
so per-request records can be paired and checked). ``--keep-requests`` also keeps one entry per
stream (``t_recv``/``t_end`` epoch, ``prompt_tokens``, measured ``ttft_s``, ``tokens`` written, ``done``) for
``GET /requests``: per-request truth.

Routes: ``POST */chat/completions`` (streaming or not), ``GET /stats`` (truth as JSON),
``GET /requests`` (per-request truth, with ``--keep-requests``), ``POST /reset`` (zero the truth),
``GET /health``. ``--procs N`` forks N processes on one
``SO_REUSEPORT`` port; process *i* also listens alone on its own port (``--truth-ports``,
default ``port + 1 + i``) so a harness can read and reset each one's truth.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import sys
import time
from typing import Any

from attnload.measure.histogram import LogHistogram

_HEAD_END = b"\r\n\r\n"
_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk (hex length, CRLF, data, CRLF)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(data: str) -> bytes:
    return _chunk(b"data: " + data.encode() + b"\n\n")


class Truth:
    """Server-side counts and timings; the reference every client number is checked against."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.received = 0
        self.completed = 0
        self.cancelled = 0
        self.tokens = 0
        self.ttft = LogHistogram()
        self.itl = LogHistogram()
        self.first_tokens: list[tuple[float, float]] = []
        """(perf_counter at the first content write, TTFT) per stream: exact, for medians over a window."""
        self.started = time.perf_counter()
        self.requests: list[dict[str, Any]] = []

    def to_json(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "completed": self.completed,
            "cancelled": self.cancelled,
            "completion_tokens": self.tokens,
            "elapsed_s": time.perf_counter() - self.started,
            "ttft": self.ttft.to_wire(),
            "itl": self.itl.to_wire(),
            "ttft_s": self.ttft.summary(),
            "itl_s": self.itl.summary(),
            "first_tokens": self.first_tokens,
        }


class Settings:
    """Fixed timings of every stream (seconds) and the default output length."""

    def __init__(
        self,
        ttft_s: float,
        itl_s: float,
        output_tokens: int,
        ttft_per_prompt_token_s: float = 0.0,
        keep_requests: bool = False,
    ) -> None:
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.output_tokens = output_tokens
        self.ttft_per_prompt_token_s = ttft_per_prompt_token_s
        self.keep_requests = keep_requests


class _Stream:
    """One streaming response in flight, driven by ``loop.call_at`` from absolute deadlines."""

    __slots__ = (
        "proto",
        "truth",
        "itl_s",
        "left",
        "emitted",
        "deadline",
        "last_at",
        "received_at",
        "token",
        "tail",
        "handle",
        "entry",
    )

    def __init__(
        self,
        proto: ChatProtocol,
        truth: Truth,
        settings: Settings,
        max_tokens: int,
        model: str,
        include_usage: bool,
        prompt_tokens: int,
    ) -> None:
        self.proto = proto
        self.truth = truth
        self.itl_s = settings.itl_s
        self.left = max_tokens
        self.emitted = 0
        self.received_at = time.perf_counter()
        self.last_at = 0.0
        self.entry: dict[str, Any] | None = None
        if settings.keep_requests:
            self.entry = {
                "t_recv": time.time(),
                "prompt_tokens": prompt_tokens,
                "ttft_s": None,
                "tokens": 0,
                "done": False,
            }
            truth.requests.append(self.entry)
        prefix = (
            '{"id":"chatcmpl-ref","object":"chat.completion.chunk","created":0,"model":'
            + json.dumps(model)
            + ',"choices":[{"index":0,"delta":'
        )
        self.token = _event(prefix + '{"content":"tok "},"finish_reason":null}]}')
        tail = _event(prefix + '{},"finish_reason":"length"}]}')
        if include_usage:
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": max_tokens,
                "total_tokens": prompt_tokens + max_tokens,
            }
            tail += _event(
                '{"id":"chatcmpl-ref","object":"chat.completion.chunk","created":0,"model":'
                + json.dumps(model)
                + ',"choices":[],"usage":'
                + json.dumps(usage)
                + "}"
            )
        self.tail = tail + _event("[DONE]") + b"0\r\n\r\n"
        loop = proto.loop
        proto.transport.write(_SSE_HEAD + _event(prefix + '{"role":"assistant","content":""},"finish_reason":null}]}'))
        self.deadline = loop.time() + settings.ttft_s + settings.ttft_per_prompt_token_s * prompt_tokens
        self.handle: asyncio.TimerHandle | None = loop.call_at(self.deadline, self.tick)

    def tick(self) -> None:
        proto = self.proto
        if proto.closed:
            self.handle = None
            return
        now = time.perf_counter()
        proto.transport.write(self.token)
        truth = self.truth
        if self.emitted:
            truth.itl.record(now - self.last_at)
        else:
            truth.ttft.record(now - self.received_at)
            truth.first_tokens.append((now, now - self.received_at))
            if self.entry is not None:
                self.entry["ttft_s"] = now - self.received_at
        self.last_at = now
        self.emitted += 1
        if self.entry is not None:
            self.entry["tokens"] = self.emitted
        truth.tokens += 1
        self.left -= 1
        if self.left > 0:
            self.deadline += self.itl_s
            self.handle = proto.loop.call_at(self.deadline, self.tick)
            return
        self.handle = None
        proto.transport.write(self.tail)
        truth.completed += 1
        if self.entry is not None:
            self.entry["done"] = True
            self.entry["t_end"] = time.time()
        proto.stream = None
        proto.next_request()


class ChatProtocol(asyncio.Protocol):
    """HTTP/1.1 keep-alive connection: one request at a time (clients do not pipeline)."""

    def __init__(self, truth: Truth, settings: Settings) -> None:
        self.truth = truth
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        self.buffer = b""
        self.stream: _Stream | None = None
        self.closed = False
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        stream = self.stream
        if stream is not None:
            self.truth.cancelled += 1
            if stream.handle is not None:
                stream.handle.cancel()
            self.stream = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.stream is None:
            self.next_request()

    def next_request(self) -> None:
        """Serve the next complete request in the buffer, if there is one."""
        while self.stream is None and not self.closed:
            buffer = self.buffer
            end = buffer.find(_HEAD_END)
            if end < 0:
                return
            head = buffer[:end].decode("latin-1")
            lines = head.split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(buffer) < end + 4 + length:
                return
            body = buffer[end + 4 : end + 4 + length]
            self.buffer = buffer[end + 4 + length :]
            method, _, rest = lines[0].partition(" ")
            path = rest.partition(" ")[0]
            self.route(method, path.split("?", 1)[0], body)

    def route(self, method: str, path: str, body: bytes) -> None:
        if method == "POST" and path.endswith("/chat/completions"):
            self.chat(body)
        elif path == "/requests":
            self.reply(200, json.dumps(self.truth.requests).encode())
        elif path == "/stats":
            self.reply(200, json.dumps(self.truth.to_json()).encode())
        elif method == "POST" and path == "/reset":
            self.truth.reset()
            self.reply(200, b'{"reset":true}')
        elif path == "/health":
            self.reply(200, b'{"status":"ok"}')
        else:
            self.reply(404, b'{"error":{"message":"not found","type":"invalid_request_error","code":"not_found"}}')

    def reply(self, status: int, body: bytes) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "OK")
        self.transport.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status, reason.encode(), len(body), body)
        )

    def chat(self, raw: bytes) -> None:
        try:
            body = json.loads(raw)
            model = str(body["model"])
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or self.settings.output_tokens)
        except (ValueError, KeyError, TypeError):
            self.reply(400, b'{"error":{"message":"bad request","type":"invalid_request_error","code":"bad"}}')
            return
        self.truth.received += 1
        prompt_tokens = sum(
            len(str(m.get("content", ""))) // 4 + 4 for m in body.get("messages") or () if isinstance(m, dict)
        )
        if not body.get("stream"):
            self.unary(model, max_tokens, prompt_tokens)
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.stream = _Stream(self, self.truth, self.settings, max(1, max_tokens), model, include_usage, prompt_tokens)

    def unary(self, model: str, max_tokens: int, prompt_tokens: int) -> None:
        """Non-streaming answer after the whole generation time (kept for completeness)."""
        delay = self.settings.ttft_s + self.settings.itl_s * (max_tokens - 1)
        body = json.dumps(
            {
                "id": "chatcmpl-ref",
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "tok " * max_tokens},
                        "finish_reason": "length",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": max_tokens,
                    "total_tokens": prompt_tokens + max_tokens,
                },
            }
        ).encode()

        def done() -> None:
            if not self.closed:
                self.truth.tokens += max_tokens
                self.truth.completed += 1
                self.reply(200, body)

        self.loop.call_later(delay, done)


def raise_fd_limit(wanted: int = 65536) -> int:
    """Raise the soft open-files limit towards ``wanted`` within the hard limit; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


def _listen(host: str, port: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(8192)
    sock.setblocking(False)
    return sock


async def _serve(shared: socket.socket, own: socket.socket | None, settings: Settings) -> None:
    loop = asyncio.get_running_loop()
    truth = Truth()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    servers = [await loop.create_server(lambda: ChatProtocol(truth, settings), sock=shared, backlog=8192)]
    if own is not None:
        servers.append(await loop.create_server(lambda: ChatProtocol(truth, settings), sock=own, backlog=8192))
    await stop.wait()
    for server in servers:
        server.close()


def truth_ports(port: int, procs: int) -> list[int]:
    """The per-process ports whose ``/stats`` together are the whole server's truth."""
    return [port] if procs <= 1 else [port + 1 + i for i in range(procs)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8800)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument(
        "--ttft-per-kprompt-ms",
        type=float,
        default=0.0,
        help="extra TTFT per 1,000 prompt tokens (each request its own TTFT)",
    )
    parser.add_argument("--keep-requests", action="store_true", help="keep per-request truth for GET /requests")
    parser.add_argument("--procs", type=int, default=1, help="processes sharing the port via SO_REUSEPORT")
    parser.add_argument("--truth-ports", default="", help="per-process /stats ports (default port+1+i)")
    args = parser.parse_args(argv)
    raise_fd_limit()
    settings = Settings(
        args.ttft_ms / 1000.0,
        args.itl_ms / 1000.0,
        args.output_tokens,
        args.ttft_per_kprompt_ms / 1e6,
        args.keep_requests,
    )
    if args.procs <= 1:
        asyncio.run(_serve(_listen(args.host, args.port, False), None, settings))
        return 0
    own_ports = (
        [int(p) for p in args.truth_ports.split(",")] if args.truth_ports else truth_ports(args.port, args.procs)
    )
    if len(own_ports) != args.procs:
        parser.error("--truth-ports needs one port per process")
    sockets = [(_listen(args.host, args.port, True), _listen(args.host, own, False)) for own in own_ports]
    children = []  # every socket bound before the first fork: a failed bind leaves no orphan
    for shared, own in sockets:
        pid = os.fork()
        if pid == 0:
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(_serve(shared, own, settings))
            os._exit(0)
        shared.close()
        own.close()
        children.append(pid)

    def forward(signum: int, _frame: Any) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for pid in children:
        os.waitpid(pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
