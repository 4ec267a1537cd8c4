"""Speculative decoding measured on the wire (issue 44): `attnload sim --spec-tokens 3 --spec-acceptance 0.6`
and an 8-user `attnload run`. The server view reads vLLM's speculative counters into the stage's
``spec_decode``, whose per-token acceptance is the simulator's 0.6; the client's tokens per decode step
are 1 + 0.6 + 0.36 + 0.216 = 2.176 (several tokens per write); the multi-token writes are flagged
``server_bursts`` for speculation, not client saturation; the verdict says what speculation bought.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnload.report.console import render_table, wide_console
from attnload.report.html import render_html
from attnload.results.model import Results
from helpers import Processes, attnload, latest_results, start_sim

EXPECTED_TOKENS_PER_STEP = 1 + 0.6 + 0.6**2 + 0.6**3


def _config(directory: Path, sim: str, max_tokens: int) -> Path:
    """One GQA model on the simulator, a short prompt, answers of ``max_tokens``."""
    config = directory / "config.json"
    config.write_text(
        json.dumps(
            {
                "base_url": sim,
                "models": {"gqa_model": {"id": "llama-3-70b", "attention_type": "GQA"}},
                "test_prompts": {"short": "hello"},
                "request": {"max_tokens": max_tokens},
            }
        ),
        encoding="utf-8",
    )
    return config


def test_speculation_on_the_wire(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "roofline", "--spec-tokens", "3", "--spec-acceptance", "0.6")
    config = _config(tmp_path, sim, max_tokens=256)
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--shape",
            "concurrency:8",
            "--stage-duration",
            "10s",
            "--spawn-rate",
            "100",
            "--server-metrics-interval",
            "1",
            "--results",
            str(results),
            "--metrics-port",
            "0",
        ),
        name="run",
    )
    assert run.wait(timeout=90) == 0, processes.log_of(run)[-3000:]
    data = latest_results(results)
    assert data["client"]["client_saturated"] is False, data["client"]
    (model,) = data["models"]
    stage = model["stages"][0]
    spec = stage["server"]["spec_decode"]
    assert spec["acceptance_rate"] == pytest.approx(0.6, abs=0.05), spec
    assert spec["draft_tokens"] > 1000 and spec["tokens_per_step"] == pytest.approx(EXPECTED_TOKENS_PER_STEP, rel=0.05)
    assert stage["tokens_per_step"] == pytest.approx(EXPECTED_TOKENS_PER_STEP, rel=0.10), stage
    assert "server_bursts" in stage["flags"] and stage["server_bursts"]["reason"] == "speculation", stage["flags"]
    assert "gqa_model speculated" in data["verdict"]["text"], data["verdict"]
    (verdict,) = data["verdict"]["models"]
    assert verdict["tokens_per_step"] == pytest.approx(EXPECTED_TOKENS_PER_STEP, rel=0.10), verdict
    report = Results.model_validate(data)
    page = render_html(report)
    assert 'data-series="gqa_model client"' in page and 'id="spec-acceptance"' in page
    console = wide_console()
    with console.capture() as captured:
        console.print(render_table(report))
    assert "speculative decoding" in captured.get()


def test_fixed_mode_speculation_is_exact(processes: Processes, tmp_path: Path) -> None:
    """Fixed mode at full acceptance: every 10 ms gap is a verify step bringing 1 + 3 tokens, so a
    13-token answer is the prefill's token and three steps of 4 (TTFT 20 ms, e2e 50 ms), exactly."""
    sim = start_sim(
        processes,
        "--mode",
        "fixed",
        "--ttft-ms",
        "20",
        "--itl-ms",
        "10",
        "--spec-tokens",
        "3",
        "--spec-acceptance",
        "1",
    )
    config = _config(tmp_path, sim, max_tokens=13)
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--users",
            "4",
            "--duration",
            "5s",
            "--results",
            str(results),
            "--metrics-port",
            "0",
        ),
        name="run",
    )
    assert run.wait(timeout=60) == 0, processes.log_of(run)[-3000:]
    (model,) = latest_results(results)["models"]
    stage = model["stages"][0]
    assert stage["tokens_per_step"] == 4.0, stage
    assert stage["server"]["spec_decode"]["acceptance_rate"] == 1.0, stage["server"]
    assert model["ttft_s"]["p50"] == pytest.approx(0.020, abs=0.004)
    assert model["e2e_s"]["p50"] == pytest.approx(0.050, abs=0.006)
