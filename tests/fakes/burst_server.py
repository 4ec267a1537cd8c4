"""A chat server that writes several SSE events per write: a server that flushes in bursts.

Run as a real process: ``python tests/fakes/burst_server.py PORT [EVENTS_PER_WRITE] [INTERVAL_MS] [TOKENS]``
(defaults 4, 40, 48). Each response streams TOKENS one-token content events, EVENTS_PER_WRITE of
them in one ``write`` (one HTTP chunk) every INTERVAL_MS, as vLLM's API server does under load.
A client that keeps up reads each burst whole: every event after a burst's first gets an ITL of 0.
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    per_write = 4
    interval_s = 0.04
    tokens = 48

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
        body = b'{"object":"list","data":[{"id":"burst-model","object":"model"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [self._event(body, i) for i in range(self.tokens)]
        usage = {"prompt_tokens": 16, "completion_tokens": self.tokens, "total_tokens": 16 + self.tokens}
        events.append(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        events.append(b"data: [DONE]\n\n")
        time.sleep(self.interval_s)  # the first burst after one interval, like the rest
        for start in range(0, len(events), self.per_write):
            data = b"".join(events[start : start + self.per_write])
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            if start + self.per_write < len(events):
                time.sleep(self.interval_s)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _event(self, body: dict[str, object], i: int) -> bytes:
        chunk = {
            "id": "burst",
            "object": "chat.completion.chunk",
            "model": body.get("model"),
            "choices": [
                {"index": 0, "delta": {"content": " tok"}, "finish_reason": "stop" if i == self.tokens - 1 else None}
            ],
        }
        return f"data: {json.dumps(chunk)}\n\n".encode()


def main() -> None:
    args = sys.argv[1:]
    port = int(args[0])
    if len(args) > 1:
        Handler.per_write = int(args[1])
    if len(args) > 2:
        Handler.interval_s = float(args[2]) / 1000.0
    if len(args) > 3:
        Handler.tokens = int(args[3])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
