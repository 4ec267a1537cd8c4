"""Test helpers: free ports, real processes that are always stopped, configs pointing at them.

The package's modules hold the rest: :mod:`helpers.exposition` (reading Prometheus text),
:mod:`helpers.results` (results built for the report tests), :mod:`helpers.observe` (a real
Prometheus and the dashboards' queries). The fake servers the tests start live in ``tests/fakes/``.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"
"""The fake servers, each runnable as ``python tests/fakes/NAME.py`` (and importable: on pytest's path)."""
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_json(url: str, data: bytes | None = None, timeout: float = 10.0) -> Any:
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with DIRECT.open(request, timeout=timeout) as response:
        return json.loads(response.read())


def http_text(url: str, timeout: float = 10.0) -> str:
    with DIRECT.open(url, timeout=timeout) as response:
        return response.read().decode()


@contextmanager
def serve_in_thread(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on 127.0.0.1 for the ``with`` block; yields its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def wait_http(
    url: str,
    process: subprocess.Popen[bytes] | Sequence[subprocess.Popen[bytes]] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Until ``url`` answers (its body unread: a fake may never end it); fails as soon as a watched process exits."""
    watched = [] if process is None else [process] if isinstance(process, subprocess.Popen) else list(process)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for item in watched:
            if item.poll() is not None:
                raise RuntimeError(f"{item.args} exited with {item.returncode} before {url} answered")
        try:
            DIRECT.open(url, timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


def require_binary(name: str) -> str:
    """Path of a system binary; missing is a failure in CI (which installs it), a skip elsewhere."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed: .ci/run must apt-get install it")
        pytest.skip(f"{name} is not installed (apt-get install {name})")
    return path


class Processes:
    """Starts real processes and guarantees they are stopped when the test ends."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.items: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(
        self, args: Sequence[str], env: dict[str, str] | None = None, name: str = "proc", cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        log = self.log_dir / f"{name}-{len(self.items)}.log"
        handle = log.open("wb")
        process = subprocess.Popen(
            list(args),
            env={**os.environ, **(env or {})},
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=cwd or ROOT,
            start_new_session=True,
        )
        self.items.append((process, log))
        return process

    def log_of(self, process: subprocess.Popen[bytes]) -> str:
        for item, log in self.items:
            if item is process:
                return log.read_text(errors="replace")
        return ""

    def stop_all(self) -> None:
        for process, _ in self.items:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 10
        for process, _ in self.items:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def attnload(*args: str) -> list[str]:
    return [sys.executable, "-m", "attnload", *args]


def start_sim(processes: Processes, *args: str) -> str:
    """Start ``attnload sim`` on a free port; returns its base URL (``http://127.0.0.1:PORT``)."""
    port = free_port()
    process = processes.start(attnload("sim", "--host", "127.0.0.1", "--port", str(port), *args), name="sim")
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", process)
    return url


def write_config(
    directory: Path, base_url: str, models: dict[str, tuple[str, str]] | None = None, **extra: Any
) -> Path:
    """A seed-format JSON config; ``models`` maps key -> (id, attention)."""
    models = models or {"gqa_model": ("llama-3-70b", "GQA"), "mla_model": ("deepseek-chat", "MLA")}
    data: dict[str, Any] = {
        "base_url": base_url,
        "models": {k: {"id": i, "attention_type": a} for k, (i, a) in models.items()},
    }
    data.update(extra)
    path = directory / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def latest_results(results_dir: Path) -> dict[str, Any]:
    name = (results_dir / "latest.txt").read_text().strip()
    return json.loads((results_dir / name).read_text())
