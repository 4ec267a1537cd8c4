"""A shape that sizes its own prompts needs none in its profile: ``--shape context:1k`` with a profile that
names only ``max_tokens`` runs against ``attnload sim --mode fixed`` (exit 0), every prompt at the rung's
length and every answer at the profile's; without such a shape the same profile is one line and exit 2."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers import ROOT, Processes, attnload, free_port, latest_results, start_sim, write_config

ANSWER = 8


def test_a_ladder_runs_a_profile_that_names_only_max_tokens(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "20", "--itl-ms", "5")
    config = write_config(
        tmp_path, f"{sim}/v1", {"gqa_model": ("llama-3-70b", "GQA")}, workload={"bare": {"max_tokens": ANSWER}}
    )
    run = processes.start(
        attnload(
            "run", "-c", str(config), "--results", str(tmp_path / "results"), "--metrics-port", str(free_port()),
            "--shape", "context:1k", "--users", "2", "--stage-duration", "3s", "--stop-timeout", "5",
        ),
        name="run",
    )  # fmt: skip
    assert run.wait(timeout=120) == 0, processes.log_of(run)[-3000:]
    (stage,) = latest_results(tmp_path / "results")["models"][0]["stages"]
    assert stage["context"] == 1024 and stage["requests"]["ok"] >= 2 and stage["requests"]["failed"] == 0, stage
    assert abs(stage["prompt_tokens_p50"] - 1024) <= 0.05 * 1024, stage
    assert stage["completion_tokens"] == ANSWER * stage["requests"]["ok"], stage


def test_without_such_a_shape_the_profile_is_refused_in_one_line(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, "http://127.0.0.1:9/v1", {"gqa_model": ("llama-3-70b", "GQA")}, workload={"bare": {"max_tokens": 8}}
    )
    out = subprocess.run(
        attnload("run", "-c", str(config), "--results", str(tmp_path / "results"), "--users", "1", "-t", "2s"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "profile 'bare' needs `prompt` (text) or `prompt_tokens`" in line and "--shape context:" in line
