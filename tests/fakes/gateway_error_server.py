"""A gateway that refuses every chat completion with one fixed status and body.

Why: a gateway's error wording decides the error class a run reports (LiteLLM answers an unknown
model with HTTP 400 and "Invalid model name passed in model=..."), and an end-to-end run must see
the bytes exactly as the gateway sends them. ``GET /health`` answers 200 so tests can wait for it;
``GET /counts`` reports how many chat requests were refused; ``GET .../models`` lists one
model (``--serves``, "gpt-4o") as a gateway's model list does.

``--fail-every N`` refuses only every Nth request and answers the others with a short chat stream;
``--echo-auth`` puts the request's Authorization header into the error body (a gateway that quotes the key
it was sent: the client must redact it).

Run as ``python tests/fakes/gateway_error_server.py --port N --status 400 --body-file body.json``.
"""

from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STREAM = (
    b'data: {"choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":" there"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}\n\n'
    b"data: [DONE]\n\n"
)


def make_handler(
    status: int, body: bytes, serves: str = "gpt-4o", fail_every: int = 1, echo_auth: bool = False
) -> type[BaseHTTPRequestHandler]:
    lock, counts = threading.Lock(), {"chat": 0, "refused": 0}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
            pass

        def _send(self, code: int, payload: bytes, content_type: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
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
                refuse = counts["chat"] % fail_every == 0
                counts["refused"] += refuse
            if not refuse:
                self._send(200, STREAM, "text/event-stream")
                return
            auth = (self.headers.get("Authorization") or "").encode()
            self._send(status, body.replace(b"{auth}", auth) if echo_auth else body)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--status", type=int, default=400)
    parser.add_argument("--body-file", type=Path, required=True)
    parser.add_argument("--serves", default="gpt-4o")
    parser.add_argument("--fail-every", type=int, default=1)
    parser.add_argument("--echo-auth", action="store_true")
    args = parser.parse_args()
    handler = make_handler(args.status, args.body_file.read_bytes(), args.serves, args.fail_every, args.echo_auth)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
