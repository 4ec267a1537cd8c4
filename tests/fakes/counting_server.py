"""A chat server whose tokenizer counts prompts differently from attnload's estimator, for calibration tests.

Run as a real process: ``python tests/fakes/counting_server.py PORT LOG.jsonl RATIO [OVERHEAD]``. Each
request's ``usage.prompt_tokens`` is ``round(RATIO × estimator count) + OVERHEAD``: RATIO 1.35 is a
tokenizer that counts 35 % more than 4 bytes a token, OVERHEAD a chat template's fixed tokens. It
streams a short reply, then the usage chunk (as vLLM does with ``stream_options.include_usage``), and
appends to LOG what it counted, in arrival order: the truth a calibration test checks against.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_lock = threading.Lock()


def estimated(messages: list[dict[str, str]]) -> int:
    """attnload's estimator (docs/cost-model.md §4.5), restated so the fake does not import attnload."""
    return sum(-(-len(str(m.get("content", "")).encode()) // 4) + 4 for m in messages)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = ""
    ratio = 1.0
    overhead = 0

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
        self._send(b'{"status":"ok"}', "application/json")

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        messages = body.get("messages") or []
        estimate = estimated(messages)
        counted = round(self.ratio * estimate) + self.overhead
        completion = 4
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(completion):
            delta = {"choices": [{"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": None}]}
            self._chunk(f"data: {json.dumps(delta)}\n\n".encode())
            time.sleep(0.002)
        usage = {"prompt_tokens": counted, "completion_tokens": completion, "total_tokens": counted + completion}
        last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        self._chunk(f"data: {json.dumps(last)}\n\ndata: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        entry = {"t": time.time(), "model": body.get("model"), "estimated": estimate, "prompt_tokens": counted}
        with _lock, open(self.log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")

    def _send(self, data: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def main() -> None:
    port, Handler.log_path, Handler.ratio = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    Handler.overhead = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
