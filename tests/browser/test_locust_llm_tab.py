"""Live: ``locust --master`` with 2 workers against ``attnload sim --mode fixed``, driven from chromium.

Starts a test from Locust's form, reads the LLM tab (TTFT p50 within 3 ms of the sim's
fixed 50 ms, token rate > 0), then stops it from the UI. Everything binds 127.0.0.1 on
free ports and every process is stopped, whatever happens.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, free_port, http_json, wait_http

from .llm_tab import open_llm_tab, read_llm_table, start_from_ui, stop_from_ui

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

LOCUSTFILE = ROOT / "locustfiles" / "chat.py"
TTFT_MS, ITL_MS = 50, 10


def _stats(web: str, procs: list[subprocess.Popen[bytes]]) -> Any:
    wait_http(f"{web}/stats/requests", procs, timeout_s=10)
    return http_json(f"{web}/stats/requests")


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
    for proc in reversed(procs):
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture
def live_master(tmp_path: Path) -> Iterator[str]:
    with _master_on_sim(tmp_path, ["--mode", "fixed", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]) as web:
        yield web


@pytest.fixture
def live_master_kv(tmp_path: Path) -> Iterator[str]:
    """The cost-model simulator with a KV pool small enough that two users fill a few percent of it."""
    with _master_on_sim(tmp_path, ["--kv-capacity-scale", "0.0005"]) as web:
        yield web


@contextlib.contextmanager
def _master_on_sim(tmp_path: Path, sim_args: list[str]) -> Iterator[str]:
    if not LOCUSTFILE.exists() or importlib.util.find_spec("attnload.sim.cli") is None:
        pytest.skip("needs the core: locustfiles/chat.py and `attnload sim`")
    sim_port, web_port, master_port = free_port(), free_port(), free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "base_url": sim_url,
                "models": {
                    "llama-3-70b": {"id": "llama-3-70b", "attention_type": "GQA", "max_context": 8192},
                    "deepseek-v3": {"id": "deepseek-chat", "attention_type": "MLA", "max_context": 65536},
                },
                "test_prompts": {"short": "Say hello."},
                "benchmark": {"repeat": 1, "max_tokens": 32, "temperature": 0},
            }
        )
    )
    env = {
        **os.environ,
        "ATTNLOAD_CONFIG": str(config),
        "ATTNLOAD_METRICS_PORT": str(free_port()),
        "PYTHONUNBUFFERED": "1",
    }
    logs = {name: (tmp_path / f"{name}.log").open("wb") for name in ("sim", "master", "worker1", "worker2")}
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(name: str, args: list[str], extra_env: dict[str, str] | None = None) -> None:
        procs.append(
            subprocess.Popen(
                args, cwd=ROOT, env={**env, **(extra_env or {})}, stdout=logs[name], stderr=subprocess.STDOUT
            )
        )

    try:
        spawn(
            "sim",
            [
                sys.executable,
                "-m",
                "attnload",
                "sim",
                *sim_args,
                "--port",
                str(sim_port),
                "--models",
                "llama-3-70b,deepseek-v3",
            ],
        )
        wait_http(f"{sim_url}/v1/models", procs, timeout_s=30)
        locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
        spawn(
            "master",
            [
                *locust,
                "--master",
                "--master-bind-host",
                "127.0.0.1",
                "--master-bind-port",
                str(master_port),
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(web_port),
                "-H",
                sim_url,
            ],
        )
        web = f"http://127.0.0.1:{web_port}"
        wait_http(web, procs, timeout_s=30)
        for name in ("worker1", "worker2"):
            spawn(name, [*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)])
        deadline = time.monotonic() + 30
        while _stats(web, procs).get("worker_count") != 2:
            assert time.monotonic() < deadline, "2 workers did not connect"
            time.sleep(0.5)
        yield web
    finally:
        _stop(procs)
        for log in logs.values():
            log.close()


def _logs(tmp_path: Path) -> str:
    """The tail of each process log, for the assertion message."""
    return "".join(f"\n--- {p.name}\n" + p.read_text(errors="replace")[-1500:] for p in sorted(tmp_path.glob("*.log")))


def _ms(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.timeout(180)
def test_llm_tab_shows_sim_ttft_live(browser: Any, live_master: str, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: errors.append(f"network: {r.url}") if not r.url.startswith(live_master) else None)
    page.goto(live_master)
    # One user per worker: the 3 ms budget is about the measurement path, so keep the 2 shared
    # cores (sim, master, workers, chromium) from queueing each other.
    start_from_ui(page, users=2, spawn_rate=2)
    page.wait_for_timeout(6000)
    open_llm_tab(page)
    deadline = time.monotonic() + 30
    while True:
        rows = [r for r in read_llm_table(page) if r.get("TTFT p50 (ms)")]
        if len(rows) >= 2 and all(_ms(r["Output tok/s"]) > 0 for r in rows):
            break
        assert time.monotonic() < deadline, f"LLM tab rows never filled: {rows}"
        page.wait_for_timeout(1000)
    for row in rows:
        assert abs(_ms(row["TTFT p50 (ms)"]) - TTFT_MS) <= 3, (row, _logs(tmp_path))
        assert _ms(row["Output tok/s"]) > 0, row
    page.screenshot(path=str(tmp_path / "llm_tab_live.png"), full_page=True)
    stop_from_ui(page)
    page.wait_for_function("() => /stopped/i.test(document.body.innerText)", timeout=20000)
    page.get_by_role("tab", name="Statistics").click()
    assert page.locator("table tbody tr").count() > 0, "Locust's statistics table must keep working"
    assert errors == []


PERCENT = re.compile(r"^\d{1,3}\.\d %$")
"""How a share reads on the page: one decimal and a percent sign ("2.3 %"), never ``0.0230970743``."""


@pytest.mark.timeout(180)
def test_llm_tab_reads_like_the_console(browser: Any, live_master_kv: str, tmp_path: Path) -> None:
    """The simulator's KV gauge (a 0-1 fraction on /metrics) shows as "2.3 %"; ms and tok/s rounded."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(live_master_kv)
    start_from_ui(page, users=2, spawn_rate=2)
    open_llm_tab(page)
    deadline = time.monotonic() + 60
    while True:
        rows = [r for r in read_llm_table(page) if r.get("Server KV used") and r.get("TTFT p50 (ms)")]
        if len(rows) >= 2 and any(r["Server KV used"] != "0.0 %" for r in rows):  # GQA's cache fills first
            break
        assert time.monotonic() < deadline, f"KV cells never filled: {read_llm_table(page)} {_logs(tmp_path)}"
        page.wait_for_timeout(1000)
    for row in rows:
        assert PERCENT.match(row["Server KV used"]), row
        assert 0.0 <= float(row["Server KV used"].rstrip(" %")) <= 100.0, row
        assert re.fullmatch(r"[\d,]+(\.\d)?", row["TTFT p50 (ms)"]), row  # 50.1, 1,234: the console's rounding
        assert re.fullmatch(r"[\d,]+(\.\d{1,2})?", row["Output tok/s"]), row
    stop_from_ui(page)


SERIES_POINTS = """() => Object.fromEntries(Array.from(document.querySelectorAll('svg.attnload-live-chart')).map(svg =>
    [svg.dataset.metric, Object.fromEntries(Array.from(svg.querySelectorAll('polyline.attnload-live-series'))
        .map(p => [p.dataset.model, Number(p.dataset.points)]))]))"""


@pytest.mark.timeout(180)
def test_llm_tab_live_charts_grow_with_the_real_run(browser: Any, live_master: str, tmp_path: Path) -> None:
    """Real master, workers and simulator: a chart per metric, a series per model, more points each poll."""
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: errors.append(f"network: {r.url}") if not r.url.startswith(live_master) else None)
    page.goto(live_master)
    start_from_ui(page, users=2, spawn_rate=2)
    open_llm_tab(page)
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('polyline.attnload-live-series'))"
        ".filter(p => Number(p.dataset.points) >= 2).length >= 8",
        timeout=30000,
    )
    first = page.evaluate(SERIES_POINTS)
    assert sorted(first) == ["itl_p50_ms", "output_tok_s", "ttft_p50_ms", "ttft_p99_ms"], first
    assert all(set(series) == {"llama-3-70b", "deepseek-v3"} for series in first.values()), first
    page.wait_for_timeout(5000)  # two more polls
    later = page.evaluate(SERIES_POINTS)
    for metric, series in first.items():
        for model, points in series.items():
            assert later[metric][model] > points, (metric, model, first, later, _logs(tmp_path))
    page.screenshot(path=str(tmp_path / "llm_live_real.png"), full_page=True)
    stop_from_ui(page)
    assert errors == []
