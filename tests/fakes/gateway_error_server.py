"""A gateway that refuses every chat completion with one fixed status and body.

Why: a gateway's error wording decides the error class a run reports (LiteLLM answers an unknown
model with HTTP 400 and "Invalid model name passed in model=..."), and an end-to-end run must see
the bytes exactly as the gateway sends them. ``GET /health`` answers 200 so tests can wait for it;
``GET /counts`` reports how many chat requests were refused; ``GET .../models`` lists one
model (``--serves``, "gpt-4o") as a gateway's model list does.

Run as ``python tests/fakes/gateway_error_server.py --port N --status 400 --body-file body.json``.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def make_handler(status: int, body: bytes, serves: str = "gpt-4o") -> type[BaseHTTPRequestHandler]:
    lock, counts = threading.Lock(), {"chat": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
            pass

        def _send(self, code: int, payload: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path == "/counts":
                with lock:
                    self._send(200, json.dumps(counts).encode())
            elif self.path.endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": [{"id": serves, "object": "model"}]}).encode())
            else:
                self._send(200, b'{"status": "ok"}')

        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                counts["chat"] += 1
            self._send(status, body)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--status", type=int, default=400)
    parser.add_argument("--body-file", type=Path, required=True)
    parser.add_argument("--serves", default="gpt-4o")
    args = parser.parse_args()
    server = ThreadingHTTPServer(
        ("127.0.0.1", args.port), make_handler(args.status, args.body_file.read_bytes(), args.serves)
    )
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
