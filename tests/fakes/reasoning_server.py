"""A reasoning chat server for end-to-end tests: reasoning deltas first, then the answer, at fixed times.

Run as a real process: ``python tests/fakes/reasoning_server.py PORT [FIELD]``. Every streamed reply is
``REASONING_TOKENS`` one-word deltas in ``delta.<FIELD>`` (``reasoning`` as vLLM 0.32 names it, or
``reasoning_content``), then ``ANSWER_TOKENS`` one-word ``delta.content`` deltas. The first delta is
written ``TTFT_S`` after the request was read and each later one ``ITL_S`` after the one before it,
against absolute deadlines (no drift), so the truth is known: TTFT = ``TTFT_S``, TTFAT =
``TTFT_S + REASONING_TOKENS × ITL_S``. The final usage chunk says ``completion_tokens`` =
reasoning + answer but ``completion_tokens_details.reasoning_tokens`` = 0, as vLLM 0.32 reports it
when the chat template opens ``<think>`` in the prompt. ``GET /stats`` returns the whole replies sent
and every delta written.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TTFT_S = 0.050
ITL_S = 0.020
REASONING_TOKENS = 8
ANSWER_TOKENS = 4
SERVER_REASONING_TOKENS = 0
"""What usage claims: not what was streamed (vLLM 0.32 with a template that opens ``<think>``)."""
_lock = threading.Lock()
_sent = {"requests": 0, "reasoning_deltas": 0, "content_deltas": 0}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    field = "reasoning"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
        with _lock:
            body = json.dumps(_sent if self.path == "/stats" else {"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        start = time.perf_counter()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deltas = [{self.field: "think "}] * REASONING_TOKENS + [{"content": "answer "}] * ANSWER_TOKENS
        for i, delta in enumerate(deltas):
            wait = start + TTFT_S + i * ITL_S - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            last = i == len(deltas) - 1
            choice = {"index": 0, "delta": delta, "finish_reason": "length" if last else None}
            self._event({"id": "r", "object": "chat.completion.chunk", "model": body.get("model"), "choices": [choice]})
            with _lock:  # counted as written: a stream cut short counts what it sent
                _sent["reasoning_deltas" if self.field in delta else "content_deltas"] += 1
        prompt = sum(len(str(m.get("content", "")).encode()) // 4 + 4 for m in body.get("messages", []))
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": len(deltas),
            "total_tokens": prompt + len(deltas),
            "completion_tokens_details": {"reasoning_tokens": SERVER_REASONING_TOKENS},
        }
        self._event(
            {"id": "r", "object": "chat.completion.chunk", "model": body.get("model"), "choices": [], "usage": usage}
        )
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        with _lock:
            _sent["requests"] += 1

    def _event(self, data: dict[str, object]) -> None:
        self._chunk(f"data: {json.dumps(data)}\n\n".encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def main() -> None:
    port = int(sys.argv[1])
    if len(sys.argv) > 2:
        Handler.field = sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
