"""Both per-chunk paths with real processes: ``attnload run`` against the fixed-mode simulator
(TTFT 50 ms, ITL 10 ms, 16 tokens exactly), once compiled and once with ATTNLOAD_PURE_PYTHON=1.

Each must match the server's truth (TTFT p50 no earlier than 50 ms and close to it, ITL p50
~10 ms, every token counted) and the results must have the same structure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from attnload import native
from helpers import Processes, attnload, free_port, latest_results, start_sim, write_config

TOKENS = 16


def shape(data: dict[str, Any]) -> dict[str, Any]:
    """The results' structure: the keys of the file, of a model and of its latency summaries."""
    model = data["models"][0]
    return {
        "top": sorted(data),
        "model": sorted(model),
        **{name: sorted(model[name]) for name in ("requests", "ttft_s", "itl_s", "tpot_s", "e2e_s")},
    }


def run(processes: Processes, config: Path, results: Path, pure: bool) -> tuple[dict[str, Any], str]:
    env = {native.PURE_ENV: "1" if pure else ""}
    process = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "-u",
            "4",
            "-t",
            "4s",
            "--metrics-port",
            str(free_port()),
            "--results",
            str(results),
        ),
        env=env,
        name="run",
    )
    assert process.wait(timeout=120) == 0, processes.log_of(process)
    return latest_results(results), processes.log_of(process)


@pytest.mark.skipif(native.extension() is None, reason="attnload.native._fastpath is not built")
def test_compiled_and_pure_runs_match_truth_and_each_other(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "50", "--itl-ms", "10")
    config = write_config(
        tmp_path,
        sim + "/api/v1",
        models={"mla": ("deepseek-chat", "MLA")},
        test_prompts={"short": "hello"},
        benchmark={"max_tokens": TOKENS, "repeat": 1},
    )
    compiled, _ = run(processes, config, tmp_path / "compiled", pure=False)
    pure, _ = run(processes, config, tmp_path / "pure", pure=True)
    for data in (compiled, pure):
        model = data["models"][0]
        ok = model["requests"]["ok"]
        assert ok > 0 and model["requests"]["failed"] == 0
        assert model["completion_tokens"] >= ok * TOKENS and not model["estimated_tokens"]  # + cancelled ones' tokens
        # one ITL sample per token after the first, the gaps a request cut at the stop had seen included
        cut = model["requests"]["cancelled"]
        assert ok * (TOKENS - 1) <= model["itl_s"]["count"] <= (ok + cut) * (TOKENS - 1), model["requests"]
        ttft = model["ttft_s"]["p50"]
        assert 0.049 <= ttft <= 0.1, ttft  # truth 50 ms: never early; late only by this shared machine's load
        assert 0.009 <= model["itl_s"]["mean"] <= 0.02, model["itl_s"]  # the mean: a late chunk shortens the next gap
    assert shape(compiled) == shape(pure)
