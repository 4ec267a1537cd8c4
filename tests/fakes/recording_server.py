"""A chat server for end-to-end tests that records what it receives and streams a known reply.

Run as a real process: ``python tests/fakes/recording_server.py PORT LOG.jsonl [CHUNK_DELAY_MS [FLAG…]]``
(flags ``nodelay``, ``refuse-auto-tools``). Every request body is appended to LOG with the wall time
its body was read (``t_recv``) and the wall time its last byte was written (``t_end``), so a test can
check, server side, what each conversation turn carried, when it arrived and how long the client
thought between turns.

The reply of request *n* is ``REPLY.format(n=n)``, streamed in pieces, with characters a sloppy
client would mangle (non-ASCII, quotes, a backslash, trailing whitespace): a conversation must
resend it byte for byte.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLY = 'Answer {n}: "größer" \\ über\n  '
_counter = itertools.count(1)
_lock = threading.Lock()


def reply_text(n: int) -> str:
    return REPLY.format(n=n)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    log_path = ""
    chunk_delay_s = 0.0
    refuse_auto_tools = False

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
        body = b'{"status":"ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        t_recv = time.time()
        body = json.loads(raw)
        if self.refuse_auto_tools and body.get("tools") and body.get("tool_choice", "auto") == "auto":
            self._refuse_tools()
            return
        with _lock:
            n = next(_counter)
        text = reply_text(n)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
        for i, piece in enumerate(pieces):
            chunk = {
                "id": f"r{n}",
                "object": "chat.completion.chunk",
                "model": body.get("model"),
                "choices": [
                    {"index": 0, "delta": {"content": piece}, "finish_reason": "stop" if i == len(pieces) - 1 else None}
                ],
            }
            self._chunk(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
            if self.chunk_delay_s:
                time.sleep(self.chunk_delay_s)
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        t_end = time.time()
        entry = {"n": n, "t_recv": t_recv, "t_end": t_end, "reply": text, "body": body}
        with _lock, open(self.log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def _refuse_tools(self) -> None:
        """vLLM 0.32 without tool-call parsing, given ``tools`` and the default (auto) tool choice."""
        message = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        data = json.dumps({"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}})
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def main() -> None:
    port, log_path = int(sys.argv[1]), sys.argv[2]
    Handler.log_path = log_path
    Handler.chunk_delay_s = float(sys.argv[3]) / 1000.0 if len(sys.argv) > 3 else 0.0
    # "nodelay": each chunk leaves at once (no Nagle wait for the client's delayed ACK, up to 40 ms), so t_end
    # is when the client can have the answer; tests that time the client's next request to a few ms ask for it
    Handler.disable_nagle_algorithm = "nodelay" in sys.argv[4:]
    Handler.refuse_auto_tools = "refuse-auto-tools" in sys.argv[4:]  # answer `tools` + auto as vLLM 0.32 does
    ThreadingHTTPServer.request_queue_size = 256  # bursty open loop: a burst of new connections must not hit SYN drops
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
