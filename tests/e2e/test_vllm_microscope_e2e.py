"""The attention microscope against real vLLM (CPU build) with the tiny GQA and MLA models (marker ``vllm``).

`--shape decode:256-4k --users 4` (two sequences per model decoding in lockstep to the tiny models' 4,096
positions): a positive slope for both with ``r2`` reported, and ``kv_read`` giving the slope only (a CPU has no
GPU preset: the note says what is missing). `--shape capacity:1k` on servers whose KV holds ~7 sequences each
(GQA 128 MiB, MLA 36 MiB): each model's ``max_running`` is what vLLM's own ``num_requests_running`` said at the
knee, and MLA holds more than 2.5× GQA's sequences per MiB. Whatever the real engine
shows is what the report says (docs/microscope.md, docs/vllm.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnload.engines import tiny_models
from attnload.engines.vllm import INSTALL_HINT, ServerSpec, running, vllm_env
from helpers import Processes, attnload, free_port, latest_results

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1200)]


def _pair(
    root: Path, kv_cache_bytes: int, max_model_len: int, mla_kv_cache_bytes: int | None = None
) -> tuple[ServerSpec, ServerSpec]:
    tiny_models.write_pair(root / "models")
    common: dict[str, Any] = {"max_model_len": max_model_len}
    gqa = ServerSpec(
        root / "models" / tiny_models.GQA_NAME,
        tiny_models.GQA_NAME,
        free_port(),
        core=0,
        kv_cache_bytes=kv_cache_bytes,
        **common,
    )
    mla = ServerSpec(
        root / "models" / tiny_models.MLA_NAME,
        tiny_models.MLA_NAME,
        free_port(),
        core=1,
        kv_cache_bytes=mla_kv_cache_bytes or kv_cache_bytes,
        **common,
    )
    return gqa, mla


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerSpec, ServerSpec]]:
    if vllm_env() is None:
        pytest.skip(INSTALL_HINT)
    root = tmp_path_factory.mktemp("vllm-microscope")
    pair = _pair(root, 256 * 2**20, tiny_models.MAX_POSITIONS)
    with running(list(pair), root / "logs"):
        yield pair


def _run(processes: Processes, directory: Path, pair: tuple[ServerSpec, ServerSpec], *args: str) -> dict[str, Any]:
    directory.mkdir(parents=True, exist_ok=True)
    gqa, mla = pair
    models = {
        key: {
            "id": spec.served_name,
            "attention_type": attention,
            "base_url": f"{spec.base_url}/v1",
            "max_context": tiny_models.MAX_POSITIONS,
        }
        for key, spec, attention in (("gqa_model", gqa, "GQA"), ("mla_model", mla, "MLA"))
    }
    config = directory / "config.json"
    config.write_text(
        json.dumps(
            {
                "base_url": f"{gqa.base_url}/v1",
                "models": models,
                "workload": {"single": {"prompt_tokens": 32, "max_tokens": 64}},
                "request": {"temperature": 0, "total_timeout_s": 600, "idle_timeout_s": 120},
            }
        ),
        encoding="utf-8",
    )
    process = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--results",
            str(directory / "results"),
            "--metrics-port",
            "0",
            "--server-metrics-interval",
            "1",
            *args,
        ),
        name="run",
    )
    assert process.wait(timeout=900) == 0, processes.log_of(process)[-3000:]
    return latest_results(directory / "results")


def test_a_decode_sweep_gives_both_tiny_models_a_positive_slope(
    roomy: tuple[ServerSpec, ServerSpec], processes: Processes, tmp_path: Path
) -> None:
    data = _run(processes, tmp_path, roomy, "--shape", "decode:256-4k", "--users", "4", "--stage-duration", "600s")
    for model in data["models"]:
        (stage,) = model["stages"]
        fit = stage["decode_fit"]
        assert fit is not None and fit["samples"] > 1000 and fit["sequences"] == 2, (model["key"], fit)
        assert fit["slope_ms_per_1k"] > 0 and fit["r2"] is not None, (model["key"], fit)
        read = model["kv_read"]
        assert read["slope_ms_per_1k"] == fit["slope_ms_per_1k"] and read["measured_bytes_per_token_per_gpu"] is None
        assert "gpu_type" in read["note"] and "memory_bandwidth_gbps" in read["note"], read
    assert "grows" in data["verdict"]["text"]


def test_a_capacity_probe_agrees_with_vllms_own_running_count(processes: Processes, tmp_path: Path) -> None:
    if vllm_env() is None:
        pytest.skip(INSTALL_HINT)
    # The same 8,192 tokens of KV for each (7.5 sequences of 1,088): GQA's 2 × 8 heads × 128 per token and layer in
    # 128 MiB, MLA's 512 + 64 latent in 36 MiB. With 128 MiB MLA held ~26, and at 16 users it queued on the CPU's
    # compute (12 running, then 13 in a later stage) before its KV was full: a knee, but not the KV's.
    kv = {"gqa_model": 128, "mla_model": 36}
    pair = _pair(tmp_path / "servers", kv["gqa_model"] * 2**20, 2048, mla_kv_cache_bytes=kv["mla_model"] * 2**20)
    with running(list(pair), tmp_path / "logs"):
        data = _run(processes, tmp_path / "run", pair, "--shape", "capacity:1k", "--stage-duration", "20s")
    per_mib = {}
    for model in data["models"]:
        cap = model["kv_capacity"]
        assert cap is not None and cap["max_running"] and cap["knee"] is not None, (model["key"], cap)
        # vLLM never runs more than its KV holds: its most running sequences in any stage is the knee's
        seen = max(s["server"]["requests_running"]["max"] for s in model["stages"] if s["server"])
        assert cap["max_running"] == round(seen), (model["key"], cap, seen)
        assert cap["kv_tokens"] == cap["max_running"] * (1024 + 64), cap
        per_mib[model["key"]] = cap["max_running"] / kv[model["key"]]
    assert per_mib["mla_model"] > 2.5 * per_mib["gqa_model"], per_mib  # MLA's compressed KV: more sequences a byte
