"""attnload against a real vLLM (CPU build) serving the tiny GQA and MLA models (marker ``vllm``).

One pair of servers for the module (a cold CPU server takes ~30 s to a minute on 2 cores; idle, its workers
still keep a quarter of a core busy, so it stops before the next module starts its own), shared by every test:
- ``tiny-gqa``: prefix caching with ``--block-size 32`` and ``--enable-prompt-tokens-details``;
- ``tiny-mla``: the CPU MLA backend (block 16, no prefix cache), started *without*
  ``--enable-prompt-tokens-details``, so vLLM sends no ``prompt_tokens_details`` at all;
- both with the same 8 MiB KV budget: 480 GQA tokens (16 KiB each) against 1,808 MLA tokens.

Truth comes from vLLM itself: its counters and gauges, scraped here with prometheus_client's own
parser (not attnload's), and its real error bodies. ``make test-vllm`` runs these (``.ci/run`` too,
after ``make vllm-env``); without the vLLM env they skip and say how to install it (docs/vllm.md).
"""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from attnload.apis import request_body
from attnload.client.chat import ApiClient
from attnload.client.classify import classify_status
from attnload.client.transport import Timeouts
from attnload.config.urls import api_url
from attnload.engines import tiny_models
from attnload.engines.vllm import INSTALL_HINT, ServerSpec, running, scrape, vllm_env
from attnload.errors import ErrorClass
from helpers import DIRECT, Processes, attnload, free_port, latest_results
from helpers.exposition import sums_by_name

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

KV_BYTES = 8 * 2**20
MAX_MODEL_LEN = 448
"""8 MiB hold 16 GQA blocks of 32 tokens, one of them vLLM's null block: 480 tokens, so 448 fits."""


@dataclass(frozen=True)
class Pair:
    gqa: ServerSpec
    mla: ServerSpec
    models: Path


@pytest.fixture(scope="module")
def vllm_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    if vllm_env() is None:
        pytest.skip(INSTALL_HINT)
    root = tmp_path_factory.mktemp("vllm")
    tiny_models.write_pair(root / "models")
    gqa = ServerSpec(
        root / "models" / tiny_models.GQA_NAME,
        tiny_models.GQA_NAME,
        free_port(),
        core=0,
        kv_cache_bytes=KV_BYTES,
        max_model_len=MAX_MODEL_LEN,
        block_size=32,
        max_num_seqs=16,
    )
    mla = ServerSpec(
        root / "models" / tiny_models.MLA_NAME,
        tiny_models.MLA_NAME,
        free_port(),
        core=1,
        kv_cache_bytes=KV_BYTES,
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=16,
        prompt_tokens_details=False,
    )
    with running([gqa, mla], root / "logs"):
        yield Pair(gqa, mla, root / "models")


# ----------------------------------------------------------------------------- helpers


def series(base_url: str) -> dict[str, float]:
    """``name`` -> value for every vLLM sample (labels dropped: one model per server), by our own parse."""
    return sums_by_name(scrape(base_url), lambda s: s.name.startswith("vllm:") and "le" not in s.labels)


def config(pair: Pair, directory: Path, workload: dict[str, Any], *, gqa_id: str | None = None) -> Path:
    def entry(spec: ServerSpec, attention: str, model_id: str | None = None) -> dict[str, Any]:
        return {
            "id": model_id or spec.served_name,
            "attention_type": attention,
            "base_url": f"{spec.base_url}/v1",
            "tokenizer": str(pair.models / tiny_models.GQA_NAME / "tokenizer.json"),
        }  # exact prompt sizes

    data = {
        "base_url": f"{pair.gqa.base_url}/v1",
        "models": {"gqa_model": entry(pair.gqa, "GQA", gqa_id), "mla_model": entry(pair.mla, "MLA")},
        "workload": workload,
        "request": {"total_timeout_s": 300, "idle_timeout_s": 120},
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def run(processes: Processes, config_path: Path, *args: str, timeout_s: float = 400) -> dict[str, Any]:
    results = config_path.parent / "results"
    process = processes.start(
        attnload(
            "run",
            "-c",
            str(config_path),
            "--results",
            str(results),
            "--metrics-port",
            "0",
            "--workers",
            "1",
            "--server-metrics-interval",
            "1",
            "--stop-timeout",
            "120",
            *args,
        ),
        name="run",
    )
    assert process.wait(timeout=timeout_s) == 0, processes.log_of(process)[-3000:]
    return latest_results(results)


def model(data: dict[str, Any], key: str) -> dict[str, Any]:
    return next(m for m in data["models"] if m["key"] == key)


class Watcher:
    """Scrapes both servers every 0.5 s in a thread: the max of each gauge the test saw itself."""

    NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")

    def __init__(self, *urls: str) -> None:
        self.max = {url: dict.fromkeys(self.NAMES, 0.0) for url in urls}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            for url, seen in self.max.items():
                values = series(url)
                for name in self.NAMES:
                    seen[name] = max(seen[name], values.get(name, 0.0))

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def post_chat(spec: ServerSpec, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"{spec.base_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with DIRECT.open(request, timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("api", ["chat", "completions", "responses", "messages"])
def test_each_api_counts_as_vllm(vllm_pair: Pair, api: str) -> None:
    """The client's prompt and completion tokens equal vLLM's counter deltas whether the answer came as chat,
    completions, Responses or Anthropic Messages (vLLM 0.32 serves all four from one server), streamed or not."""
    gqa = vllm_pair.gqa
    client = ApiClient(
        api_url(f"{gqa.base_url}/v1/chat/completions", api, gqa.served_name),
        "sk-unused-by-vllm",
        Timeouts(connect_s=10, ttft_s=None, idle_s=120, total_s=300),
        api=api,
    )
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours."}]
    before = series(gqa.base_url)
    records = [
        client.send(
            request_body(api, gqa.served_name, messages, max_tokens=12, temperature=0, stream=stream, ignore_eos=True),
            model_key="m",
            profile="p",
            stage=0,
        )
        for stream in (True, True, False)
    ]
    client.close()
    after = series(gqa.base_url)
    for record in records:
        assert record.outcome == "ok", (api, record.error, client.last_failure)
        assert not record.tokens_estimated and record.ttft_s is not None and record.completion_tokens > 0, api
    prompt = after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]
    generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
    assert sum(r.prompt_tokens for r in records) == prompt, api
    assert sum(r.completion_tokens for r in records) == generated, api
    streamed = records[0]
    assert streamed.ttfat_s is not None and streamed.ttfat_s >= streamed.ttft_s and streamed.reasoning_tokens == 0


def test_client_tokens_equal_vllm_counters_and_server_view(
    vllm_pair: Pair, processes: Processes, tmp_path: Path
) -> None:
    """Client usage totals = vLLM's own counter deltas; the server view's gauges match our scrapes."""
    path = config(vllm_pair, tmp_path, {"short": {"prompt_tokens": 48, "max_tokens": 16, "ignore_eos": True}})
    urls = (vllm_pair.gqa.base_url, vllm_pair.mla.base_url)
    before = {url: series(url) for url in urls}
    with Watcher(*urls) as watcher:
        data = run(processes, path, "--users", "4", "--duration", "20s")
    for key, url in zip(("gqa_model", "mla_model"), urls, strict=True):
        summary, after = model(data, key), series(url)
        assert summary["requests"]["ok"] > 0 and summary["requests"]["failed"] == 0, summary["errors"]
        assert summary["requests"]["cancelled"] == 0 and not summary["estimated_tokens"]
        prompt = after["vllm:prompt_tokens_total"] - before[url]["vllm:prompt_tokens_total"]
        generated = after["vllm:generation_tokens_total"] - before[url]["vllm:generation_tokens_total"]
        assert summary["prompt_tokens"] == prompt
        assert summary["completion_tokens"] == generated == 16 * summary["requests"]["ok"]  # ignore_eos
        server = summary["server"]
        assert server["source"] == "vllm"
        # its counters are windows between its own scrapes: at most the requests still running at the last one
        assert generated - 16 * 2 <= server["generation_tokens"] <= generated
        assert prompt - 2 * (prompt / summary["requests"]["ok"]) <= server["prompt_tokens"] <= prompt
        seen = watcher.max[url]
        assert 1 <= server["requests_running"]["max"] <= 2  # 2 users per model
        assert abs(server["requests_running"]["max"] - seen["vllm:num_requests_running"]) <= 1
        assert 0 < server["kv_cache_usage"]["max"] <= 1.0
        assert server["kv_cache_usage"]["max"] <= seen["vllm:kv_cache_usage_perc"] + 0.1


def test_prompts_without_a_tokenizer_are_calibrated_to_their_target(
    vllm_pair: Pair, processes: Processes, tmp_path: Path
) -> None:
    """No model tokenizer: the estimator's 256-token prompts count ~188 on the tiny models' tokenizer; learned
    from vLLM's usage, the later half of each model's requests lands within 5 % of 256 (results: calibrated)."""
    path = config(vllm_pair, tmp_path, {"short": {"prompt_tokens": 256, "max_tokens": 4, "ignore_eos": True}})
    data = json.loads(path.read_text())
    for entry in data["models"].values():
        del entry["tokenizer"]
    path.write_text(json.dumps(data))
    requests = tmp_path / "requests.jsonl.gz"
    results = run(processes, path, "--users", "2", "--duration", "10s", "--requests-out", str(requests))
    lines = [json.loads(line) for line in gzip.open(requests, "rt") if line.strip()]
    for key in ("gqa_model", "mla_model"):
        counted = [r["prompt_tokens"] for r in sorted(lines, key=lambda r: r["start_s"]) if r["target"] == key]
        assert len(counted) >= 10, counted
        assert counted[0] < 0.9 * 256  # the estimator alone misses by the tokenizer's difference
        assert abs(statistics.median(counted[len(counted) // 2 :]) - 256) <= 0.05 * 256, counted
        assert model(results, key)["prompt_sizes"] == "calibrated"


def test_gqa_conversation_hits_the_prefix_cache(vllm_pair: Pair, processes: Processes, tmp_path: Path) -> None:
    """GQA with --enable-prompt-tokens-details: cached prompt tokens rise from turn 2 (block 32)."""
    path = config(
        vllm_pair,
        tmp_path,
        {"chat": {"conversation": {"turns": 3, "user_tokens": 40}, "max_tokens": 24, "ignore_eos": True}},
    )
    data = run(processes, path, "--users", "2", "--duration", "25s")
    turns = {t["turn"]: t for t in model(data, "gqa_model")["turns"]}
    assert {1, 2, 3} <= set(turns)
    assert not turns[1]["cached_tokens_mean"]  # a fresh salt: nothing to reuse (0)
    assert turns[2]["cached_tokens_mean"] >= 32 and turns[3]["cached_tokens_mean"] > turns[2]["cached_tokens_mean"]
    assert model(data, "gqa_model")["server"]["prefix_cache_hit_ratio"] > 0


def test_cached_tokens_are_null_when_vllm_does_not_report_them(
    vllm_pair: Pair, processes: Processes, tmp_path: Path
) -> None:
    """The MLA server runs without --enable-prompt-tokens-details: vLLM sends no
    ``prompt_tokens_details``, and every turn's ``cached_tokens_mean`` is null, never 0."""
    path = config(
        vllm_pair,
        tmp_path,
        {"chat": {"conversation": {"turns": 2, "user_tokens": 32}, "max_tokens": 8, "ignore_eos": True}},
    )
    status, body = post_chat(
        vllm_pair.mla,
        {"model": vllm_pair.mla.served_name, "max_tokens": 2, "messages": [{"role": "user", "content": "hello"}]},
    )
    assert status == 200 and json.loads(body)["usage"].get("prompt_tokens_details") is None
    data = run(processes, path, "--users", "2", "--duration", "12s")
    turns = model(data, "mla_model")["turns"]
    assert turns and all(t["cached_tokens_mean"] is None for t in turns), turns


def test_vllm_error_bodies_get_their_classes(vllm_pair: Pair) -> None:
    """vLLM's own bodies: a prompt over max_model_len is context_length, an unknown model not_found."""
    long_text = " ".join(["attention"] * (MAX_MODEL_LEN * 2))
    status, body = post_chat(
        vllm_pair.gqa,
        {"model": vllm_pair.gqa.served_name, "max_tokens": 8, "messages": [{"role": "user", "content": long_text}]},
    )
    failure = classify_status(status, body)
    assert status == 400 and failure.kind in (ErrorClass.CONTEXT_LENGTH, ErrorClass.BAD_REQUEST), body
    assert failure.kind is ErrorClass.CONTEXT_LENGTH and "\n" not in failure.detail
    status, body = post_chat(
        vllm_pair.gqa, {"model": "no-such-model", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    )
    failure = classify_status(status, body)
    assert status == 404 and failure.kind is ErrorClass.NOT_FOUND and "\n" not in failure.detail, body


def test_attnload_check_against_vllm(vllm_pair: Pair, tmp_path: Path) -> None:
    """``attnload check``: both real servers pass; an unknown model id is one not_found verdict, exit 1."""
    good = config(vllm_pair, tmp_path / "good", {})
    done = subprocess.run(attnload("check", "-c", str(good), "--json"), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [m["verdict"] for m in json.loads(done.stdout)["models"]] == ["ok", "ok"]
    bad = config(vllm_pair, tmp_path / "bad", {}, gqa_id="no-such-model")
    done = subprocess.run(
        attnload("check", "-c", str(bad), "--model", "gqa_model"), capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 1, done.stdout + done.stderr
    verdicts = [line for line in done.stdout.splitlines() if "not_found" in line]
    assert len(verdicts) >= 1 and "no-such-model" in done.stdout


def test_equal_kv_budget_queues_gqa_while_mla_admits(vllm_pair: Pair, processes: Processes, tmp_path: Path) -> None:
    """Same 8 MiB of KV: 6 requests of ~250 tokens (8 blocks of 32) overflow GQA's 15 blocks (it
    queues or preempts), while MLA's 1,808 tokens (113 blocks of 16) hold all six at once."""
    path = config(vllm_pair, tmp_path, {"long": {"prompt_tokens": 200, "max_tokens": 48, "ignore_eos": True}})
    before = {s.served_name: series(s.base_url) for s in (vllm_pair.gqa, vllm_pair.mla)}
    with Watcher(vllm_pair.gqa.base_url, vllm_pair.mla.base_url) as watcher:
        data = run(processes, path, "--users", "12", "--duration", "30s", "--spawn-rate", "100")
    gqa, mla = model(data, "gqa_model")["server"], model(data, "mla_model")["server"]
    gqa_seen, mla_seen = watcher.max[vllm_pair.gqa.base_url], watcher.max[vllm_pair.mla.base_url]
    preempted = {
        s.served_name: series(s.base_url).get("vllm:num_preemptions_total", 0.0)
        - before[s.served_name].get("vllm:num_preemptions_total", 0.0)
        for s in (vllm_pair.gqa, vllm_pair.mla)
    }
    assert gqa["requests_waiting"]["max"] >= 1 or preempted[vllm_pair.gqa.served_name] > 0, (gqa, preempted)
    assert gqa_seen["vllm:num_requests_waiting"] >= 1 or preempted[vllm_pair.gqa.served_name] > 0
    assert gqa["kv_cache_usage"]["max"] >= 0.8
    assert mla["requests_waiting"]["max"] == 0 and mla_seen["vllm:num_requests_waiting"] == 0
    assert preempted[vllm_pair.mla.served_name] == 0
    assert mla["requests_running"]["max"] == 6
    assert mla["kv_cache_usage"]["max"] < gqa["kv_cache_usage"]["max"]


def test_a_context_ladder_lands_on_its_rungs_and_scales_per_model(
    vllm_pair: Pair, processes: Processes, tmp_path: Path
) -> None:
    """A two-rung ladder, one user per model, prompts sized exactly by the tiny models' tokenizer: each stage's
    measured prompt p50 is within 5 % of its rung, the client's prompt tokens are vLLM's own counter delta
    (so the requests' mean is vLLM's delta ÷ requests), and both models carry ``context_scaling``."""
    rungs = (128, 384)  # 384 + 16 answer tokens + the template fit the pair's max_model_len of 448
    path = config(vllm_pair, tmp_path, {"single": {"prompt_tokens": 32, "max_tokens": 16, "ignore_eos": True}})
    urls = (vllm_pair.gqa.base_url, vllm_pair.mla.base_url)
    before = {url: series(url) for url in urls}
    data = run(processes, path, "--shape", "context:128,384", "--users", "2", "--stage-duration", "20s")
    for key, url in zip(("gqa_model", "mla_model"), urls, strict=True):
        summary = model(data, key)
        stages = summary["stages"]
        assert [s["context"] for s in stages] == list(rungs), stages
        for stage, rung in zip(stages, rungs, strict=True):
            assert stage["requests"]["ok"] > 0 and stage["requests"]["failed"] == 0, stage
            assert abs(stage["prompt_tokens_p50"] - rung) <= 0.05 * rung, (key, stage["prompt_tokens_p50"], rung)
        delta = series(url)["vllm:prompt_tokens_total"] - before[url]["vllm:prompt_tokens_total"]
        assert summary["prompt_tokens"] == delta
        ok = sum(s["requests"]["ok"] for s in stages)
        weighted = sum(s["prompt_tokens_p50"] * s["requests"]["ok"] for s in stages) / ok
        assert abs(weighted - delta / summary["requests"]["ok"]) <= 0.05 * weighted, (weighted, delta, ok)
        points = summary["context_scaling"]
        assert [p["context"] for p in points] == list(rungs) and points[0]["relative"] == 1.0, points
        assert points[1]["relative"] is not None and points[1]["relative"] > 0, points
    assert "From 128 to 384 tokens of context at 1 user per model" in data["verdict"]["text"]


def test_gqa_agent_steps_hit_the_prefix_cache(vllm_pair: Pair, processes: Processes, tmp_path: Path) -> None:
    """An agent profile on the tiny GQA model (prefix caching, --enable-prompt-tokens-details, block 32),
    ``tool_choice: none`` because the server runs without tool-call parsing: every step carries the
    ``tools`` array, tool calls and ``role: tool`` results, and cached tokens are > 0 from step 2."""
    agent = {
        "steps": 3,
        "system_tokens": 96,
        "tools": {"count": 1, "tokens": 32},
        "tool_choice": "none",
        "tool_result_tokens": 40,
        "tool_time_s": 0.2,
    }
    path = config(vllm_pair, tmp_path, {"agent": {"agent": agent, "max_tokens": 16, "ignore_eos": True}})
    data = run(processes, path, "--users", "2", "--duration", "25s")
    steps = {row["step"]: row for row in model(data, "gqa_model")["steps"]}
    assert {1, 2, 3} <= set(steps), steps
    assert steps[2]["requests"] > steps[2]["failed"] and not model(data, "gqa_model")["errors"]
    assert steps[2]["cached_tokens_mean"] > 0 and steps[3]["cached_tokens_mean"] > 0
    assert steps[3]["context_tokens"] > steps[2]["context_tokens"] > steps[1]["context_tokens"]
    assert all(row["cached_tokens_mean"] is None for row in model(data, "mla_model")["steps"])  # not reported
