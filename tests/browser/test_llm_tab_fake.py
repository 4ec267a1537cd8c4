"""The LLM tab in chromium against a Locust web UI fed by a fake snapshot (no simulator needed)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import FAKES, free_port

from .llm_tab import open_llm_tab, read_llm_table, start_from_ui, stop_from_ui

pytestmark = pytest.mark.browser
SCRIPT = FAKES / "fake_llm_webui.py"


@pytest.fixture
def fake_ui() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "fake web UI did not listen"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_llm_tab_updates_while_running(browser: Any, fake_ui: str, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: errors.append(f"network: {r.url}") if not r.url.startswith(fake_ui) else None)
    page.goto(fake_ui)
    start_from_ui(page, users=3, spawn_rate=3, host="http://127.0.0.1:1")
    open_llm_tab(page)
    page.wait_for_function("() => document.querySelectorAll('table tbody tr').length >= 2", timeout=15000)
    first = read_llm_table(page)
    assert {row["Model"] for row in first} == {"llama-3-70b (GQA)", "deepseek-v3 (MLA)"}
    for row in first:
        assert float(row["TTFT p50 (ms)"]) == pytest.approx(50.0, abs=0.05)
    rate = float(first[0]["Output tok/s"].replace(",", ""))
    page.wait_for_timeout(4500)  # two polls of Locust's 2 s refresh
    later = float(read_llm_table(page)[0]["Output tok/s"].replace(",", ""))
    assert later > rate, "the LLM tab must refresh while the test runs"
    page.screenshot(path=str(tmp_path / "llm_tab.png"), full_page=True)
    page.get_by_role("tab", name="Statistics").click()
    page.wait_for_function("() => document.body.innerText.includes('/fake')", timeout=10000)
    stop_from_ui(page)
    assert errors == []


CHART_STATE = """() => Array.from(
    document.querySelectorAll('#attnload-live-charts svg.attnload-live-chart')).map(svg => ({
    metric: svg.dataset.metric,
    visible: svg.getBoundingClientRect().height > 0,
    series: Array.from(svg.querySelectorAll('polyline.attnload-live-series')).map(p => ({
        model: p.dataset.model, attention: p.dataset.attention, points: Number(p.dataset.points),
        color: p.getAttribute('stroke')})),
    marks: Array.from(svg.querySelectorAll('g.attnload-stage-mark')).map(g => g.dataset.stage)}))"""


def test_llm_tab_live_charts_grow_and_mark_stages(browser: Any, fake_ui: str, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: errors.append(f"network: {r.url}") if not r.url.startswith(fake_ui) else None)
    page.goto(fake_ui)
    start_from_ui(page, users=3, spawn_rate=3, host="http://127.0.0.1:1")
    open_llm_tab(page)
    page.wait_for_function(
        "() => document.querySelectorAll('polyline.attnload-live-series').length >= 8", timeout=15000
    )
    first = page.evaluate(CHART_STATE)
    assert [c["metric"] for c in first] == ["ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "output_tok_s"]
    for chart in first:
        assert chart["visible"], chart
        colours = {s["attention"].upper(): s["color"] for s in chart["series"]}
        assert colours == {"GQA": "#1f77b4", "MLA": "#ff7f0e"}, chart  # one colour per attention type
    page.wait_for_timeout(STAGE_WAIT_MS)
    later = page.evaluate(CHART_STATE)
    for before, after in zip(first, later, strict=True):
        grown = {s["model"]: s["points"] for s in after["series"]}
        for series in before["series"]:
            assert grown[series["model"]] > series["points"], (before, after)
        assert after["marks"], f"no stage change marked on {after['metric']}"
    page.screenshot(path=str(tmp_path / "llm_live_charts.png"), full_page=True)
    page.get_by_role("tab", name="Statistics").click()
    page.wait_for_timeout(300)
    assert not page.locator("#attnload-live-charts").is_visible(), "charts belong to the LLM tab only"
    stop_from_ui(page)
    assert errors == []


STAGE_WAIT_MS = 7000
"""Longer than the fake's 5 s stages and three 2 s polls."""
