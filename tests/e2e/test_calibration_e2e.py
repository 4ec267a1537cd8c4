"""Prompt sizes calibrated from the server, end to end: a real ``attnload run`` against a server whose
tokenizer counts 35 % more prompt tokens than attnload's estimator (and one that counts 20 % fewer plus
a chat template's 30 fixed tokens, as the tiny models' did).

Truth is the fake's own record of what it counted (``usage.prompt_tokens``), in arrival order: the first
answers teach each worker the ratio, so the later half of the requests must land on the 1024 target
(median within 5 %), where the estimator alone sends 1382 (or 849). The results say ``calibrated``.
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from pathlib import Path

import pytest

from helpers import FAKES, Processes, attnload, free_port, latest_results, wait_http, write_config

TARGET = 1024


def start_counting(processes: Processes, log: Path, ratio: float, overhead: int = 0) -> str:
    port = free_port()
    process = processes.start(
        [sys.executable, str(FAKES / "counting_server.py"), str(port), str(log), str(ratio), str(overhead)],
        name="counting",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", process)
    return url


@pytest.mark.parametrize(("ratio", "overhead"), [(1.35, 0), (0.8, 30)])
def test_fixed_size_prompts_land_on_target_by_the_servers_count(
    processes: Processes, tmp_path: Path, ratio: float, overhead: int
) -> None:
    log, requests = tmp_path / "counted.jsonl", tmp_path / "requests.jsonl.gz"
    url = start_counting(processes, log, ratio, overhead)
    config = write_config(
        tmp_path,
        f"{url}/v1",
        {"gqa_model": ("llama-3-70b", "GQA")},
        workload={"fixed": {"prompt_tokens": TARGET, "max_tokens": 4}},
    )
    run = processes.start(
        attnload(
            "run", "-c", str(config), "--results", str(tmp_path / "results"), "--metrics-port", str(free_port()),
            "--users", "2", "--duration", "3s", "--stop-timeout", "5", "--requests-out", str(requests),
        ),
        name="run",
    )  # fmt: skip
    assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]

    counted = [json.loads(line)["prompt_tokens"] for line in log.read_text().splitlines() if line.strip()]
    assert len(counted) >= 20, counted
    assert counted[0] == round(ratio * TARGET) + overhead  # the estimator's first prompts, off by the tokenizer
    later = counted[len(counted) // 2 :]
    assert abs(statistics.median(later) - TARGET) <= 0.05 * TARGET, later
    lines = [json.loads(line) for line in gzip.open(requests, "rt")]
    assert sorted(line["prompt_tokens"] for line in lines) == sorted(counted)  # the per-request file agrees
    model = latest_results(tmp_path / "results")["models"][0]
    assert model["prompt_sizes"] == "calibrated"


def test_ladder_rungs_land_on_their_length_by_the_servers_count(processes: Processes, tmp_path: Path) -> None:
    """A context ladder sizes its rungs through the same calibration: the second rung, sized by the ratio the
    first one learned, lands on its length by the server's count (the estimator alone sends 35 % more)."""
    log = tmp_path / "counted.jsonl"
    url = start_counting(processes, log, 1.35)
    config = write_config(
        tmp_path,
        f"{url}/v1",
        {"gqa_model": ("llama-3-70b", "GQA")},
        workload={"fixed": {"prompt_tokens": 64, "max_tokens": 4}},
    )
    run = processes.start(
        attnload(
            "run", "-c", str(config), "--results", str(tmp_path / "results"), "--metrics-port", str(free_port()),
            "--shape", "context:512,2048", "--users", "2", "--stage-duration", "3s", "--stop-timeout", "5",
        ),
        name="run",
    )  # fmt: skip
    assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]

    model = latest_results(tmp_path / "results")["models"][0]
    assert model["prompt_sizes"] == "calibrated"
    by_context = {stage["context"]: stage for stage in model["stages"]}
    assert sorted(by_context) == [512, 2048]
    measured = by_context[2048]["prompt_tokens_p50"]
    assert abs(measured - 2048) <= 0.05 * 2048, measured
    counted = [json.loads(line)["prompt_tokens"] for line in log.read_text().splitlines() if line.strip()]
    assert counted[0] == round(1.35 * 512)  # the first rung's first prompts: the estimator, off by the tokenizer
