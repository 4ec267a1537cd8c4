"""The API key never leaves the environment: a demo-like run, a server that echoes the key, and `check`.

The sentinel is not key-shaped (no ``sk-`` prefix), so only the registration of the
env var's value can hide it: a path that forgets to redact shows up as a hit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from helpers import FAKES, Processes, attnload, free_port, http_text, start_sim, wait_http

KEY_ENV = "ATTNLOAD_SECRET_TEST_KEY"
SENTINEL = "attnload-sentinel-Zq8xK3vP7mW2"


def test_sentinel_key_appears_in_no_output(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "5", "--itl-ms", "2")
    hostile_port = free_port()
    hostile_process = processes.start(
        [sys.executable, str(FAKES / "hostile_server.py"), "--port", str(hostile_port)], name="hostile"
    )
    hostile = f"http://127.0.0.1:{hostile_port}"
    wait_http(hostile + "/health", hostile_process)
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "base_url": sim + "/api",
                "api_key_env": KEY_ENV,
                "models": {
                    "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA"},
                    "mla_model": {"id": "deepseek-chat", "attention_type": "MLA"},
                    # a gateway that rejects the key and echoes it back in the error body
                    "echo_model": {"id": "auth", "attention_type": "MLA", "base_url": hostile + "/api"},
                },
                "benchmark": {"max_tokens": 16, "repeat": 1, "temperature": 0},
            }
        ),
        encoding="utf-8",
    )
    results = tmp_path / "results"
    metrics_port = free_port()
    env = {KEY_ENV: SENTINEL}
    run = processes.start(
        attnload(
            "-v",
            "run",
            "-c",
            str(config),
            "--shape",
            "concurrency:3,6",
            "--stage-duration",
            "4s",
            "--workers",
            "2",
            "--results",
            str(results),
            "--metrics-port",
            str(metrics_port),
            "--exit-code-on-error",
            "0",
        ),  # echo_model always fails
        env=env,
        name="run",
    )
    scrapes = []
    deadline = time.monotonic() + 90
    while run.poll() is None and time.monotonic() < deadline:
        try:
            scrapes.append(http_text(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2))
        except OSError:
            pass
        time.sleep(0.5)
    assert run.wait(timeout=60) == 0, processes.log_of(run)[-3000:]
    assert scrapes and "attnload_request_errors_total" in scrapes[-1]
    assert 'error="auth"' in "".join(scrapes)  # the echoing gateway was exercised

    outputs = {"run stdout+stderr": processes.log_of(run)}
    outputs.update({f"scrape {i}": text for i, text in enumerate(scrapes)})
    outputs.update({str(p): p.read_text(errors="replace") for p in results.rglob("*") if p.is_file()})
    assert any(name.endswith(".json") for name in outputs) and any(name.endswith(".html") for name in outputs)

    latest = results / (results / "latest.txt").read_text().strip()
    report = subprocess.run(
        attnload("report", str(latest), "--html", str(tmp_path / "r.html")),
        capture_output=True,
        text=True,
        timeout=60,
        env={**_env(), **env},
    )
    outputs["report"] = report.stdout + report.stderr + (tmp_path / "r.html").read_text(errors="replace")
    for args in (["check", "-c", str(config)], ["check", "-c", str(config), "--json"]):
        check = subprocess.run(
            attnload("-v", *args), capture_output=True, text=True, timeout=120, env={**_env(), **env}
        )
        assert check.returncode == 1  # echo_model fails with auth
        assert f"ends …{SENTINEL[-4:]}" in check.stdout or f'"last4": "{SENTINEL[-4:]}"' in check.stdout
        outputs[" ".join(args)] = check.stdout + check.stderr

    hits = [name for name, text in outputs.items() if SENTINEL in text]
    assert hits == [], f"the key leaked into: {hits}"


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
