"""Speculation and prefill interference against real vLLM (CPU build) with the tiny models (marker ``vllm``).

vLLM's n-gram drafting runs on the CPU build (no second model): ``tiny-gqa`` is served with
``--speculative-config '{"method": "ngram", "num_speculative_tokens": 3, ...}'``. Its dummy weights decode
greedily into a short cycle, so the drafts are found and accepted: the server view reads vLLM's speculative
counters into ``spec_decode`` and the client sees several tokens per event, flagged as speculation. Then
``--shape interference:1k`` against both models reports a positive stall for each (docs/vllm.md).
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

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerSpec, ServerSpec]]:
    if vllm_env() is None:
        pytest.skip(INSTALL_HINT)
    root = tmp_path_factory.mktemp("vllm-decode")
    tiny_models.write_pair(root / "models")
    common: dict[str, Any] = {"kv_cache_bytes": 64 * 2**20, "max_model_len": 2048, "max_num_seqs": 16}
    gqa = ServerSpec(
        root / "models" / tiny_models.GQA_NAME,
        tiny_models.GQA_NAME,
        free_port(),
        core=0,
        block_size=32,
        extra_args=("--speculative-config", json.dumps(NGRAM)),
        **common,
    )
    mla = ServerSpec(root / "models" / tiny_models.MLA_NAME, tiny_models.MLA_NAME, free_port(), core=1, **common)
    with running([gqa, mla], root / "logs"):
        yield gqa, mla


def _run(processes: Processes, directory: Path, models: dict[str, Any], *args: str) -> dict[str, Any]:
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "config.json"
    config.write_text(
        json.dumps(
            {
                "base_url": next(iter(models.values()))["base_url"],
                "models": models,
                "workload": {"single": {"prompt_tokens": 32, "max_tokens": 256, "ignore_eos": True}},
                "request": {"temperature": 0, "total_timeout_s": 300, "idle_timeout_s": 120},
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
    assert process.wait(timeout=400) == 0, processes.log_of(process)[-3000:]
    return latest_results(directory / "results")


def _entry(spec: ServerSpec, attention: str) -> dict[str, Any]:
    return {"id": spec.served_name, "attention_type": attention, "base_url": f"{spec.base_url}/v1"}


def test_ngram_speculation_shows_in_the_server_view(
    servers: tuple[ServerSpec, ServerSpec], processes: Processes, tmp_path: Path
) -> None:
    gqa, _ = servers
    data = _run(processes, tmp_path, {"gqa_model": _entry(gqa, "GQA")}, "--users", "2", "--duration", "20s")
    (stage,) = data["models"][0]["stages"]
    spec = stage["server"]["spec_decode"]
    assert spec is not None and spec["draft_tokens"] > 0, stage["server"]
    assert spec["acceptance_rate"] > 0.5 and spec["tokens_per_step"] > 1.5, spec
    assert stage["tokens_per_step"] > 1.5, stage
    assert stage["server_bursts"]["reason"] == "speculation", stage


def test_interference_reports_a_positive_stall_for_both_models(
    servers: tuple[ServerSpec, ServerSpec], processes: Processes, tmp_path: Path
) -> None:
    gqa, mla = servers
    models = {"gqa_model": _entry(gqa, "GQA"), "mla_model": _entry(mla, "MLA")}
    data = _run(processes, tmp_path, models, "--shape", "interference:1k", "--users", "4", "--stage-duration", "40s")
    for found in data["models"]:
        interference = found["prefill_interference"]
        assert interference is not None and interference["injections"] >= 2, found["key"]
        assert interference["itl_p50_during_s"] > interference["itl_p50_baseline_s"], interference
        assert interference["ms_per_1k_prefill_tokens"] > 0, interference
