"""A stand-in for ``python -m vllm.entrypoints.openai.api_server`` in tests without vLLM.

Answers ``/v1/models`` on ``--port`` and starts one child (as vLLM starts its engine core) that
writes its pid next to the parent's, so a test can check the whole process group was stopped.
SIGTERM is ignored by the child on purpose: only a group SIGKILL ends it.
"""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
from pathlib import Path


def main() -> None:
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    pid_dir = Path(os.environ["FAKE_VLLM_PIDS"])
    child = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
    )
    (pid_dir / f"{port}.pids").write_text(f"{os.getpid()} {child.pid}")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"data": []}')

        def log_message(self, *_args: object) -> None:
            pass

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the api server exits; its child does not
    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
