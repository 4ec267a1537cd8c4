"""The attention microscope end to end against `attnload sim` (roofline, llama-3-70b GQA TP8 vs deepseek-v3 MLA
with DP attention, 8×H200, max_context raised).

`attnload run --shape decode:1k-5k --users 32`: 16 sequences per model decode in lockstep from 1K to 5K tokens of
context; each model's ``decode_fit`` slope is within 15 % of (step at 5K − step at 1K) ÷ 4 that `attnload sim
--explain MODEL --batch 16` prints (GQA 4.95 → 5.65 ms, MLA 14.76 → 14.99 ms), with ``r2`` and ``samples``;
GQA's slope is above MLA's; ``kv_read`` holds measured and predicted bytes for both; the verdict names both
slopes. `decode:1k-200k` on a model with max_context 65536 exits 2 in one line and the simulator sees nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, Processes, attnload, http_json, latest_results, start_sim

pytestmark = pytest.mark.scenario  # a minute and more of wall clock: `make test-scenarios`

SERVED_AS = {"gqa_model": "llama-3-70b", "mla_model": "deepseek-v3"}


def _config(tmp: Path, sim: str, max_context: int = 65536) -> Path:
    path = tmp / f"microscope-{max_context}.json"
    path.write_text(
        json.dumps(
            {
                "base_url": sim,
                "models": {
                    "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA", "max_context": max_context},
                    "mla_model": {"id": "deepseek-chat", "attention_type": "MLA", "max_context": 65536},
                },
                "workload": {"short": {"prompt_tokens": 64}},
            }
        ),
        encoding="utf-8",
    )
    return path


def explain_step_ms(model: str, batch: int, context: int) -> float:
    """The decode step (ms) of the ``batch`` row that `attnload sim --explain` prints at ``context``."""
    out = subprocess.run(
        attnload("sim", "--explain", model, "--batch", str(batch), "--context", str(context)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("B ") and "step" in line)
    row = next(line for line in lines[header:] if line.split() and line.split()[0] == str(batch))
    return float(row.split()[7])  # headers with spaces split in two: the step is the 8th value


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], str, str]]:
    tmp = tmp_path_factory.mktemp("microscope")
    processes = Processes(tmp)
    try:
        sim = start_sim(processes)
        command = attnload(
            "run",
            "-c",
            str(_config(tmp, sim)),
            "--shape",
            "decode:1k-5k",
            "--users",
            "32",
            "--stage-duration",
            "150s",
            "--metrics-port",
            "0",
            "--results",
            str(tmp / "results"),
        )
        run = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, start_new_session=True, text=True
        )
        try:
            stdout, stderr = run.communicate(timeout=240)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait()
        assert run.returncode == 0, stderr[-3000:]
        yield latest_results(tmp / "results"), stdout, sim
        # (the simulator's own account of its schedule is read by the slope test)
    finally:
        processes.stop_all()


def _model(data: dict[str, Any], key: str) -> dict[str, Any]:
    return next(m for m in data["models"] if m["key"] == key)


def _kept_schedule(sim: str) -> dict[str, float]:
    """Per served model: emitted ITL over scheduled ITL (1.0: the simulator kept its cost model's schedule; a
    starved simulator re-bases deadlines it missed by over 50 ms, and its steps are then longer than the truth)."""
    stats = http_json(sim + "/stats")["models"]
    return {m: s["itl_s"]["mean"] / s["itl_schedule_s"]["mean"] for m, s in stats.items() if s["itl_s"]["count"]}


def test_each_slope_matches_the_simulators_step_growth(sweep: tuple[Any, ...]) -> None:
    data = sweep[0]
    behind = {m: r for m, r in _kept_schedule(sweep[2]).items() if r > 1.005}
    if behind:  # the truth below is the schedule; a simulator that did not keep it ran other steps
        pytest.skip(f"the simulator fell behind its schedule (machine overloaded): emitted / scheduled ITL {behind}")
    assert data["config"]["shape"].startswith("decode:1024-5120")
    slopes = {}
    for key, served_as in SERVED_AS.items():
        (stage,) = _model(data, key)["stages"]
        assert stage["users"] == 16 and stage["requests"]["ok"] == 16, stage["requests"]
        fit = stage["decode_fit"]
        truth = (explain_step_ms(served_as, 16, 5120) - explain_step_ms(served_as, 16, 1024)) / 4
        assert abs(fit["slope_ms_per_1k"] - truth) <= 0.15 * truth, (key, fit, truth)
        assert fit["samples"] > 16 * 3000 and fit["r2"] is not None and fit["sequences"] == 16, fit
        assert 1024 < fit["positions"][0] < 1200 and fit["positions"][1] == 5119, fit
        slopes[key] = fit["slope_ms_per_1k"]
    assert slopes["gqa_model"] > slopes["mla_model"]


def test_kv_read_measures_both_models_against_the_kv_math(sweep: tuple[Any, ...]) -> None:
    data = sweep[0]
    for key, per_gpu in (("gqa_model", 16), ("mla_model", 2)):  # TP8 reads every sequence; DP8 a rank's two
        read = _model(data, key)["kv_read"]
        assert read["sequences_per_gpu"] == per_gpu and read["bandwidth_gbps"] == 4800, read
        assert read["measured_bytes_per_token_per_gpu"] > 0 and read["ratio"] > 0, read
        assert read["predicted_bytes_per_token_per_gpu"] == {"gqa_model": 40960, "mla_model": 70272}[key]
    # GQA's step grows as its KV read explains (at 80 % of peak bandwidth: ×1.25); MLA's faster than its read
    assert _model(data, "gqa_model")["kv_read"]["bound"] == "memory"
    assert _model(data, "mla_model")["kv_read"]["bound"] == "compute"


def test_the_verdict_names_both_slopes_first(sweep: tuple[Any, ...]) -> None:
    data, stdout, _sim = sweep
    text = data["verdict"]["text"]
    for key in SERVED_AS:
        slope = _model(data, key)["stages"][0]["decode_fit"]["slope_ms_per_1k"]
        assert f"{key} grows {slope:.3f} ms per 1K tokens of context" in text, text
    assert text.startswith("Each decode step of gqa_model grows"), text
    assert "decode fit" in stdout


def test_a_sweep_past_max_context_exits_2_before_any_request(sweep: tuple[Any, ...], tmp_path: Path) -> None:
    sim = sweep[2]
    before = http_json(sim + "/stats")["models"]
    result = subprocess.run(
        attnload("run", "-c", str(_config(tmp_path, sim)), "--shape", "decode:1k-200k", "--users", "2"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "gqa_model" in lines[0] and "max_context 65,536" in lines[0], lines
    after = http_json(sim + "/stats")["models"]
    assert {m: s["received"] for m, s in after.items()} == {m: s["received"] for m, s in before.items()}


def test_a_capacity_probe_finds_each_models_kv_capacity(tmp_path: Path) -> None:
    """`--shape capacity:8k` against the simulator with `--kv-capacity-scale 0.05`: each model's max_running is
    within 35 % of its KV capacity tokens ÷ (8K + output) (DP attention admits per rank: deepseek-v3's 8 ranks
    hold 23,504 tokens each, 2 sequences of 8,448, so 16 where the whole would hold 22), and equal to what the
    simulator's own KV blocks allow (llama-3-70b: 144,128 tokens, 17 sequences)."""
    processes = Processes(tmp_path)
    try:
        sim = start_sim(processes, "--kv-capacity-scale", "0.05")
        served = {m["id"]: m["details"] for m in http_json(sim + "/v1/models")["data"]}
        result = subprocess.run(
            attnload(
                "run",
                "-c",
                str(_config(tmp_path, sim)),
                "--shape",
                "capacity:8k",
                "--stage-duration",
                "10s",
                "--metrics-port",
                "0",
                "--results",
                str(tmp_path / "results"),
            ),
            capture_output=True,
            text=True,
            timeout=240,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        data = latest_results(tmp_path / "results")
    finally:
        processes.stop_all()
    output = 256  # the request default, pinned
    capacity = {}
    for key, served_as in (("gqa_model", "llama-3-70b"), ("mla_model", "deepseek-v3")):
        cap = _model(data, key)["kv_capacity"]
        details = served[served_as]
        whole = details["kv_capacity_tokens"] / (8192 + output)
        assert abs(cap["max_running"] - whole) <= 0.35 * whole, (key, cap, whole)
        ranks = details["dp_attention"]
        per_rank = details["kv_capacity_tokens"] // ranks // (8192 + output)  # what the blocks admit
        assert cap["max_running"] == per_rank * ranks, (key, cap, per_rank)
        assert cap["kv_tokens"] == cap["max_running"] * (8192 + output) and cap["per_gpu"] > 0, cap
        assert cap["knee"] in ("requests waiting", "KV cache full", "preemptions"), cap
        capacity[key] = cap
    assert "KV capacity: gqa_model served 17 sequences" in data["verdict"]["text"], data["verdict"]["text"]
    # the KV math: MLA holds more tokens per GPU (3.76 M against 2.88 M at full scale) ...
    assert capacity["mla_model"]["predicted_tokens"] > capacity["gqa_model"]["predicted_tokens"]
