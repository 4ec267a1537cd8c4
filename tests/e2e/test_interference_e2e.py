"""Prefill interference on the wire (issue 44): ``--shape interference:16k`` against the simulator's default
pair. Each model's decode users stream pinned answers while one injector per model sends a 16k-token prompt
every few seconds; every model gets ``prefill_interference`` with its decode ITL during the injected prefills
above its baseline, and MLA's stall per 1000 prefill tokens above GQA's (its prefill is compute-heavy and,
under DP attention, a 16k prompt advances ~1k tokens a step: docs/cost-model.md §11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnload.report.console import render_table, wide_console
from attnload.report.html import render_html
from attnload.results.model import Results
from attnload.sim.costmodel import EngineConfig, deploy
from attnload.sim.decode.interference import prefill_stall
from attnload.sim.presets import PRESETS
from helpers import Processes, attnload, latest_results, start_sim

pytestmark = pytest.mark.scenario


def test_interference_16k_stalls_mla_more_than_gqa(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes)
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "base_url": sim,
                "models": {
                    "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA"},
                    "mla_model": {"id": "deepseek-v3", "attention_type": "MLA"},
                },
                "test_prompts": {"short": "hello"},
                "request": {"max_tokens": 1024},
            }
        ),
        encoding="utf-8",
    )
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--shape",
            "interference:16k",
            "--stage-duration",
            "24s",
            "--spawn-rate",
            "100",
            "--results",
            str(results),
            "--metrics-port",
            "0",
        ),
        name="run",
    )
    assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]
    data = latest_results(results)
    found = {m["key"]: m["prefill_interference"] for m in data["models"]}
    for key, interference in found.items():
        assert interference is not None and interference["injections"] >= 2, (key, interference)
        assert interference["prefill_tokens"] == pytest.approx(16384, rel=0.02), interference
        assert interference["itl_p50_during_s"] > interference["itl_p50_baseline_s"], (key, interference)
        assert interference["itl_max_during_s"] > 5 * interference["itl_p50_baseline_s"], (key, interference)
    assert found["mla_model"]["ms_per_1k_prefill_tokens"] > found["gqa_model"]["ms_per_1k_prefill_tokens"], found
    for key, preset in (("gqa_model", "llama-3-70b"), ("mla_model", "deepseek-v3")):  # the simulator's own stall
        truth = prefill_stall(deploy(PRESETS[preset], EngineConfig()), 8, 640, 16388).ms_per_1k_prefill_tokens
        assert found[key]["ms_per_1k_prefill_tokens"] == pytest.approx(truth, rel=0.25), (key, truth, found[key])
    assert data["config"]["shape"].startswith("interference:16384"), data["config"]
    report = Results.model_validate(data)
    page = render_html(report)
    assert 'id="interference-table"' in page and 'data-series="mla_model injected prefill"' in page
    console = wide_console()
    with console.capture() as captured:
        console.print(render_table(report))
    assert "prefill interference" in captured.get()
