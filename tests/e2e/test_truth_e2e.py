"""What a run did not measure, said against real processes (docs/design.md, measurement rules).

An empty run exits 1 and says ``no_data`` first; requests a stop cut keep the TTFT they saw (or are
censored at their wait); error examples hold what the server sent, never the key; a cut Messages
request counts the tokens it streamed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import FAKES, Processes, attnload, free_port, http_json, latest_results, start_sim, wait_http, write_config

SECRET = "sk-truthtest-0123456789abcdef"


def _run(
    processes: Processes, config: Path, results: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    run = processes.start(
        attnload("run", "-c", str(config), "--results", str(results), "--metrics-port", "0", *args),
        name="run",
        env=env,
    )
    code = run.wait(timeout=120)
    return code, processes.log_of(run)


def test_a_run_slower_than_the_server_says_no_data_first_and_exits_1(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "20000")
    config = write_config(tmp_path, sim, benchmark={"max_tokens": 16})
    results = tmp_path / "results"
    code, output = _run(processes, config, results, "--users", "4", "-t", "8s")
    assert code == 1, output[-3000:]
    before = output[: output.index("no_data: ")].splitlines()
    assert all(line.startswith("stage ") for line in before if line.strip()), output[:2000]  # only progress first
    assert output.index("no_data: gqa_model") < output.index("no_data: mla_model") < output.index("verdict")
    data = latest_results(results)
    assert data["verdict"]["models"] == [] and "compared with nothing" in data["verdict"]["text"]
    for model in data["models"]:
        assert "no_data" in model["flags"] and "first token" in model["no_data_reason"]
        ttft = model["ttft_s"]
        assert "p50" in ttft["lower_bound"] and 7.0 <= ttft["p50"] <= 9.0, ttft
        assert model["censored"]["waiting_first_token"] >= 1
    assert "≥ " in output  # the console marks the bound


def test_requests_cut_while_streaming_keep_their_ttft(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "3000", "--itl-ms", "10")
    config = write_config(tmp_path, sim, benchmark={"max_tokens": 512})
    results = tmp_path / "results"
    code, output = _run(processes, config, results, "--users", "8", "-t", "5s", "--start-spread", "off")
    truth = http_json(sim + "/stats")["models"]
    data = latest_results(results)
    for model, served in zip(data["models"], ("llama-3-70b", "deepseek-v3"), strict=True):
        assert abs(model["ttft_s"]["p50"] - 3.0) <= 0.1, model["ttft_s"]
        assert "lower_bound" not in model["ttft_s"]
        stage = model["stages"][0]
        assert stage["censored"]["streaming"] == truth[served]["cancelled"], (stage["censored"], truth[served])
        assert stage["censored"]["waiting_first_token"] == 0
        assert "ttft_long" in stage["flags"]
    assert "--stage-duration" in output and code == 1  # nothing finished: no_data, and the stage is too short


def test_error_examples_hold_status_and_body_never_the_key(processes: Processes, tmp_path: Path) -> None:
    body = tmp_path / "error.json"
    body.write_text(json.dumps({"error": {"message": "upstream exploded for {auth}", "type": "server_error"}}))
    port = free_port()
    server = processes.start(
        [sys.executable, str(FAKES / "gateway_error_server.py"), "--port", str(port), "--status", "500"]
        + ["--body-file", str(body), "--fail-every", "3", "--echo-auth"],
        name="gateway",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", server)
    config = write_config(tmp_path, url, {"m": ("gpt-4o", "GQA")})
    data = json.loads(config.read_text())
    data["models"]["m"]["api_key_env"] = "TRUTH_KEY"
    config.write_text(json.dumps(data))
    results, lines = tmp_path / "results", tmp_path / "requests.jsonl"
    code, output = _run(
        processes, config, results, "--users", "2", "-t", "4s", "--requests-out", str(lines), env={"TRUTH_KEY": SECRET}
    )
    assert http_json(url + "/counts")["refused"] > 3
    model = latest_results(results)["models"][0]
    examples = model["error_examples"]["server"]
    assert len(examples) == 3, examples
    for example in examples:
        assert example["http_status"] == 500 and "upstream exploded" in example["body"] and example["time"]
        assert "HTTP 500" in example["detail"]
    assert "error example: m server" in output
    failed = [json.loads(line) for line in lines.read_text().splitlines() if '"failed"' in line]
    assert failed and all("upstream exploded" in line["error_detail"] for line in failed)
    everything = [output, *(p.read_text(errors="replace") for p in [*results.iterdir(), lines] if p.is_file())]
    assert not any(SECRET in text for text in everything)
    assert code == 1  # requests failed


def test_messages_counts_the_tokens_of_cut_requests(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "50", "--itl-ms", "20")
    config = write_config(tmp_path, sim, benchmark={"max_tokens": 200})
    data = json.loads(config.read_text())
    for model in data["models"].values():
        model.update(api="messages", api_key_env="TRUTH_KEY")
    config.write_text(json.dumps(data))
    results = tmp_path / "results"
    code, output = _run(processes, config, results, "--users", "8", "-t", "10s", env={"TRUTH_KEY": SECRET})
    assert code == 0, output[-3000:]
    truth = http_json(sim + "/stats")["models"]
    for model, served in zip(latest_results(results)["models"], ("llama-3-70b", "deepseek-v3"), strict=True):
        cut = model["requests"]["cancelled"]
        assert cut > 0
        assert abs(model["completion_tokens"] - truth[served]["completion_tokens"]) <= 2 * cut, (model, truth[served])


def test_a_ladder_rung_whose_ttft_is_long_runs_longer_unless_told_not_to(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "3000", "--itl-ms", "10")
    config = write_config(tmp_path, sim, {"m": ("llama-3-70b", "GQA")}, benchmark={"max_tokens": 16})
    ladder = ("--shape", "context:256,512", "--users", "2", "--stage-duration", "6s")
    lengths = {}
    for stretch in ("auto", "off"):
        results = tmp_path / f"results-{stretch}"
        _code, output = _run(processes, config, results, *ladder, "--ladder-stretch", stretch)
        stages = latest_results(results)["models"][0]["stages"]
        lengths[stretch] = [s["end_s"] - s["start_s"] for s in stages]
        if stretch == "auto":
            assert "runs 6 s more" in output, output[-3000:]
    assert all(11.0 <= d <= 13.5 for d in lengths["auto"]), lengths  # 3 s of 6 s: one more stage duration
    assert all(5.0 <= d <= 7.5 for d in lengths["off"]), lengths
