"""Server metrics: recorded vLLM/SGLang expositions parse to exact aggregates, windows give exact
per-stage deltas (counter resets included), the poller scrapes real HTTP servers on 127.0.0.1 and
turns a bad URL off with one warning, and the live simulator's vLLM names equal its own series."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from attnload.scrape import (
    SGLANG,
    SIM,
    VLLM,
    ScrapePoller,
    ScrapeTarget,
    ServerMetricsError,
    ServerSample,
    ServerWindow,
    counter_delta,
    default_metrics_url,
    histogram_quantile,
    parse_exposition,
)
from attnload.scrape.server import SERVER
from helpers import Processes, free_port, http_json, http_text, start_sim

DATA = Path(__file__).parent / "data" / "server_metrics"
LLAMA = "meta-llama/Llama-3.3-70B-Instruct"
DSV3 = "deepseek-ai/DeepSeek-V3"


def body(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def sample(name: str, names: frozenset[str] = frozenset()) -> ServerSample:
    found = parse_exposition(body(name)).sample_for(names)
    assert found is not None
    return found


def window_over(*names: str) -> ServerWindow:
    window = ServerWindow()
    for name in names:
        window.add(sample(name))
    return window


# ---------------------------------------------------------------------------- parsing


def test_vllm_v1_single_engine() -> None:
    exposition = parse_exposition(body("vllm_v1_t1.prom"))
    assert exposition.source == VLLM and list(exposition.samples) == [LLAMA]
    s = exposition.samples[LLAMA]
    assert (s.running, s.waiting, s.kv_cache_usage, s.preemptions) == (64, 7, 0.97, 9)
    assert (s.prefix_cache_queries, s.prefix_cache_hits, s.prefix_cache_hit_rate) == (30000, 6500, None)
    assert (s.prompt_tokens, s.generation_tokens) == (30000, 90000)
    assert (s.queue_time_sum_s, s.queue_time_count) == (65.0, 300)
    buckets = dict(s.ttft_buckets)
    assert len(buckets) == 23 and buckets[0.75] == 100 and buckets[2.5] == 290 and buckets[float("inf")] == 300


def test_vllm_older_version_gpu_cache_usage_and_hit_rate_gauge() -> None:
    s = sample("vllm_v0_gpu_cache.prom")
    assert (s.source, s.model_name, s.running, s.waiting) == (VLLM, "llama-3-70b", 7, 2)
    assert s.kv_cache_usage == 0.42  # vllm:gpu_cache_usage_perc, the pre-0.9 name
    assert (s.prefix_cache_queries, s.prefix_cache_hit_rate, s.queue_time_sum_s) == (None, 0.31, None)
    window = ServerWindow()
    window.add(s)
    assert window.summary().prefix_cache_hit_ratio == 0.31  # the gauge, when no counters exist


def test_vllm_two_engines_sum_counts_and_average_usage() -> None:
    s = sample("vllm_dp2.prom")
    assert (s.model_name, s.running, s.waiting, s.preemptions) == (DSV3, 24, 3, 8)
    assert s.kv_cache_usage == pytest.approx(0.6, abs=1e-12)  # mean of 0.5 and 0.7, not 1.2
    assert (s.prefix_cache_queries, s.prefix_cache_hits, s.prompt_tokens, s.generation_tokens) == (
        20000,
        3000,
        20000,
        50000,
    )
    buckets = dict(s.ttft_buckets)
    assert (buckets[0.1], buckets[0.25], buckets[0.5], buckets[float("inf")]) == (40, 90, 100, 100)
    assert (s.queue_time_sum_s, s.queue_time_count) == (5.0, 100)


def test_sglang_dp_ranks_add_up() -> None:
    s = sample("sglang_dp2_t0.prom")
    assert (s.source, s.model_name, s.running, s.waiting, s.preemptions) == (SGLANG, DSV3, 56, 4, 7)
    assert s.kv_cache_usage == pytest.approx(0.6, abs=1e-12)
    assert s.prefix_cache_hit_rate == pytest.approx(0.4, abs=1e-12)
    assert (s.prefix_cache_queries, s.prefix_cache_hits) == (120000, 48000)  # prompt and cached token counters
    assert (s.prompt_tokens, s.generation_tokens, s.queue_time_count) == (120000, 60000, 190)
    assert dict(s.ttft_buckets)[0.4] == 150


def test_sglang_tp_ranks_of_one_scheduler_are_copies_not_parts() -> None:
    s = sample("sglang_tp_all_schedulers.prom")  # --enable-metrics-for-all-schedulers: tp 0 and 1, dp 0
    assert (s.running, s.waiting, s.kv_cache_usage, s.preemptions, s.queue_time_count) == (5, 1, 0.6, 2, 10)


def test_model_selection_by_id_alias_and_single_model() -> None:
    two = body("vllm_v0_gpu_cache.prom") + body("vllm_v0_gpu_cache.prom").replace(
        'model_name="llama-3-70b"', 'model_name="other-model"'
    ).replace("# ", "#x ")
    exposition = parse_exposition("\n".join(line for line in two.splitlines() if not line.startswith("#x")))
    assert sorted(exposition.samples) == ["llama-3-70b", "other-model"]
    picked = exposition.sample_for({"LLAMA-3-70B"})
    assert picked is not None and picked.model_name == "llama-3-70b"
    assert exposition.sample_for({"meta/other-model"}) is not None  # the last path part matches
    assert exposition.sample_for({"deepseek-chat"}) is None  # two served, neither ours
    only = parse_exposition(body("vllm_v1_t0.prom")).sample_for({"not-its-name"})
    assert only is not None and only.model_name == LLAMA  # the only model served


@pytest.mark.parametrize(
    ("name", "reason"), [("garbage_404.html", "not_prometheus"), ("not_a_model_server.prom", "unknown_server")]
)
def test_bodies_that_are_not_a_model_server(name: str, reason: str) -> None:
    with pytest.raises(ServerMetricsError) as caught:
        parse_exposition(body(name))
    assert caught.value.reason == reason


def test_json_and_binary_bodies_are_typed_errors() -> None:
    for text in ('{"detail": "Not Found"}', "\x00\x01\xff garbage", "hello world"):
        with pytest.raises(ServerMetricsError):
            parse_exposition(text)


# ---------------------------------------------------------------------------- windows


def test_window_exact_deltas_and_ttft_quantiles() -> None:
    window = window_over("vllm_v1_t0.prom", "vllm_v1_t1.prom")
    assert window.summary().model_dump() == {
        "source": "vllm",
        "samples": 2,
        "kv_cache_usage": {"mean": pytest.approx(0.61), "max": 0.97},
        "requests_running": {"mean": 38.0, "max": 64.0},
        "requests_waiting": {"mean": 3.5, "max": 7.0},
        "preemptions": 5,
        "aborted": None,
        "prefix_cache_hit_ratio": 0.2,
        "prompt_tokens": 20000,
        "generation_tokens": 40000,
        # delta: 80 in (0.75, 1], 110 in (1, 2.5], 10 in (2.5, 5]; interpolated as histogram_quantile
        "ttft_p50_s": pytest.approx(1.0 + 1.5 * 20 / 110, rel=1e-12),
        "ttft_p99_s": pytest.approx(4.5, rel=1e-12),
        # the buckets those quantiles were interpolated in (vLLM's bounds: …0.75, 1.0, 2.5, 5.0…)
        "ttft_p50_bucket_s": (1.0, 2.5),
        "ttft_p99_bucket_s": (2.5, 5.0),
        "spec_decode": None,  # this server does not speculate
    }
    assert window.queue_time_mean_s == pytest.approx(0.3)  # (65 - 5) s over (300 - 100) requests


def test_window_counter_reset_counts_the_new_value() -> None:
    summary = window_over("vllm_v1_t0.prom", "vllm_restart_before.prom", "vllm_restart_after.prom").summary()
    assert (summary.preemptions, summary.prompt_tokens, summary.generation_tokens) == (
        (20 - 4) + 1,
        (50000 - 10000) + 2000,
        (150000 - 50000) + 6000,
    )
    assert summary.prefix_cache_hit_ratio == pytest.approx((7500 + 1000) / 42000, rel=1e-12)
    # TTFT: 300 before the restart (150 in (0.75,1], 140 in (1,2.5], 10 in (2.5,5]) + 10 after (5 ≤ 0.5, 5 ≤ 1)
    assert summary.ttft_p50_s == pytest.approx(0.75 + 0.25 * 150 / 155, rel=1e-12)
    assert summary.ttft_p99_s == pytest.approx(2.5 + 2.5 * (0.99 * 310 - 300) / 10, rel=1e-12)
    assert summary.requests_running.model_dump() == {"mean": 18.0, "max": 40.0}


def test_sglang_window_ratio_from_token_counters() -> None:
    window = window_over("sglang_dp2_t0.prom", "sglang_dp2_t1.prom")
    summary = window.summary()
    assert (summary.source, summary.preemptions, summary.prompt_tokens, summary.generation_tokens) == (
        "sglang",
        (9 - 6) + (3 - 1),
        100000,
        40000,
    )
    assert summary.prefix_cache_hit_ratio == pytest.approx(0.3)  # 30000 cached of 100000 prompt tokens
    assert summary.requests_waiting.model_dump() == {"mean": 12.5, "max": 21.0}
    assert summary.kv_cache_usage.max == pytest.approx(0.93)
    assert (summary.ttft_p50_s, summary.ttft_p99_s) == (pytest.approx(2.0), pytest.approx(3.96))
    assert window.queue_time_mean_s == pytest.approx(0.25)


def test_close_splits_stages_at_the_last_sample() -> None:
    window = window_over("vllm_v1_t0.prom", "vllm_v1_t1.prom")
    first = window.close()
    window.add(sample("vllm_restart_before.prom"))
    second = window.close()
    assert (first.preemptions, second.preemptions) == (5, 11)  # 4 → 9 | 9 → 20
    assert (first.generation_tokens, second.generation_tokens) == (40000, 60000)
    assert second.samples == 1 and second.requests_running.model_dump() == {"mean": 40.0, "max": 40.0}
    empty = window.close()  # a stage without a scrape: zero deltas from the baseline, no gauges
    assert empty.samples == 0 and empty.preemptions == 0 and empty.ttft_p50_s is None
    assert empty.kv_cache_usage.model_dump() == {"mean": None, "max": None}


def test_a_single_sample_is_its_own_baseline() -> None:
    summary = window_over("vllm_v1_t1.prom").summary()
    assert (summary.samples, summary.preemptions, summary.generation_tokens) == (1, 0, 0)
    assert summary.ttft_p50_s is None and summary.prefix_cache_hit_ratio is None


def test_histogram_quantile_edges() -> None:
    inf = float("inf")
    assert histogram_quantile(0.5, [(1.0, 0), (inf, 0)]) is None
    assert histogram_quantile(0.5, [(1.0, 4)]) is None  # no +Inf bucket: not a histogram
    assert histogram_quantile(0.5, [(1.0, 4), (2.0, 4), (inf, 4)]) == 0.5  # first bucket starts at 0
    assert histogram_quantile(0.99, [(1.0, 1), (2.0, 2), (inf, 10)]) == 2.0  # rank in +Inf: largest bound
    assert (counter_delta(10, 15), counter_delta(10, 3)) == (5, 3)


# ---------------------------------------------------------------------------- poller


class _Bodies(BaseHTTPRequestHandler):
    """Serves the next of ``server.bodies`` at /metrics (the last one repeats); status from ``server.status``."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        server = self.server
        status, text = server.status, server.bodies[min(server.hits, len(server.bodies) - 1)]  # type: ignore[attr-defined]
        server.hits += 1  # type: ignore[attr-defined]
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(bodies: list[str], status: int = 200) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Bodies)
        server.bodies, server.status, server.hits = bodies, status, 0  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_default_metrics_url_is_the_root_of_the_base_url_port() -> None:
    assert default_metrics_url("https://gw.example.com:8443/api/v1") == "https://gw.example.com:8443/metrics"
    assert default_metrics_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/metrics"
    with pytest.raises(ValueError):
        default_metrics_url("localhost:8000")


def test_poller_exact_deltas_from_a_live_server(serve: Callable[..., str], caplog: pytest.LogCaptureFixture) -> None:
    url = default_metrics_url(
        serve([body("vllm_v1_t0.prom"), body("vllm_v1_t1.prom"), body("vllm_restart_before.prom")])
    )
    poller = ScrapePoller(
        SERVER,
        [
            ScrapeTarget("gqa", url, frozenset({LLAMA})),
            ScrapeTarget("alias", url, frozenset({"llama-3.3-70b-instruct"})),
        ],
    )
    assert poller.urls() == [url]  # one fetch serves both models
    with caplog.at_level(logging.WARNING):
        poller.poll_once()
        poller.poll_once()
        stage1 = poller.close_stage(poll=False)
        stage2 = poller.close_stage()  # scrapes once more at the boundary
    assert not caplog.records
    assert stage1["gqa"] == stage1["alias"]
    assert (stage1["gqa"].preemptions, stage1["gqa"].generation_tokens, stage1["gqa"].samples) == (5, 40000, 2)
    assert stage1["gqa"].ttft_p99_s == pytest.approx(4.5)
    assert (stage2["gqa"].preemptions, stage2["gqa"].prompt_tokens) == (11, 20000)


def test_poller_404_turns_off_with_one_warning(serve: Callable[..., str], caplog: pytest.LogCaptureFixture) -> None:
    url = default_metrics_url(serve(["404 page not found"], status=404))
    poller = ScrapePoller(
        SERVER, [ScrapeTarget("gqa", url, frozenset({"x"})), ScrapeTarget("mla", url, frozenset({"y"}))]
    )
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            poller.poll_once()
        assert poller.close_stage() == {"gqa": None, "mla": None}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "gqa, mla" in warnings[0] and "HTTP 404" in warnings[0]
    assert poller.urls() == []


@pytest.mark.parametrize("name", ["garbage_404.html", "not_a_model_server.prom"])
def test_poller_non_prometheus_body_turns_off(
    serve: Callable[..., str], name: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = default_metrics_url(serve([body(name)]))
    poller = ScrapePoller(SERVER, [ScrapeTarget("gqa", url, frozenset({"x"}))])
    with caplog.at_level(logging.WARNING):
        assert poller.close_stage() == {"gqa": None}
    assert len(caplog.records) == 1 and "gqa" in poller.off()


def test_poller_refused_at_first_poll_and_model_not_served(
    serve: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    refused = f"http://127.0.0.1:{free_port()}/metrics"
    two = body("sglang_dp2_t0.prom") + body("vllm_v1_t0.prom").replace("vllm:", "sglang:").replace(
        LLAMA, "other"
    ).replace("# ", "#x ")
    served = default_metrics_url(serve(["\n".join(x for x in two.splitlines() if not x.startswith("#x"))]))
    poller = ScrapePoller(
        SERVER,
        [
            ScrapeTarget("down", refused, frozenset({"a"})),
            ScrapeTarget("mla", served, frozenset({DSV3})),
            ScrapeTarget("gone", served, frozenset({"not-served"})),
        ],
    )
    with caplog.at_level(logging.WARNING):
        summaries = poller.close_stage()
    assert summaries["down"] is None and summaries["gone"] is None
    assert summaries["mla"] is not None and summaries["mla"].source == "sglang"
    assert sorted(poller.off()) == ["down", "gone"] and len(caplog.records) == 2


def test_poller_run_loop_stops(serve: Callable[..., str]) -> None:
    url = default_metrics_url(serve([body("vllm_v1_t0.prom")]))
    poller = ScrapePoller(SERVER, [ScrapeTarget("gqa", url, frozenset({LLAMA}))], interval_s=0.05)
    thread = threading.Thread(target=poller.run)
    thread.start()
    try:
        while (summary.samples if (summary := poller.peek()["gqa"]) else 0) < 3:
            threading.Event().wait(0.02)
    finally:
        poller.stop()
        thread.join(timeout=5)
    assert not thread.is_alive()


# ---------------------------------------------------------------------------- the live simulator


def _chat(base: str, model: str, prefix: str) -> None:
    data = json.dumps(
        {
            "model": model,
            "max_tokens": 12,
            "stream": False,
            "messages": [{"role": "user", "content": prefix + " question"}],
        }
    ).encode()
    http_json(base + "/v1/chat/completions", data=data, timeout=60)


def _both(base: str) -> tuple[dict[str, ServerSample], dict[str, ServerSample]]:
    text = http_text(base + "/metrics")
    return parse_exposition(text).samples, parse_exposition(text, flavour=VLLM).samples


def test_simulator_speaks_vllm_with_its_own_values(processes: Processes) -> None:
    base = start_sim(processes, "--kv-capacity-scale", "0.05")
    shared = "You are a careful assistant. " * 40  # several 64-byte blocks: later requests hit the prefix cache
    for model in ("llama-3-70b", "deepseek-v3"):
        _chat(base, model, shared)  # computes and publishes the shared blocks
    threads = [
        threading.Thread(target=_chat, args=(base, model, shared))
        for model in ("llama-3-70b", "deepseek-v3")
        for _ in range(5)
    ]
    for thread in threads:
        thread.start()
    own, vllm = _both(base)  # mid-flight: gauges come from one body, so they agree exactly
    for thread in threads:
        thread.join(timeout=60)
    assert set(own) == set(vllm) == {"llama-3-70b", "deepseek-v3"}
    fields = ("running", "waiting", "kv_cache_usage", "preemptions", "prompt_tokens", "generation_tokens")
    for model in own:
        assert own[model].source == SIM and vllm[model].source == VLLM
        assert [getattr(own[model], f) for f in fields] == [getattr(vllm[model], f) for f in fields]
    own, vllm = _both(base)
    stats = http_json(base + "/stats")["models"]
    for model, s in vllm.items():
        assert [getattr(own[model], f) for f in fields] == [getattr(s, f) for f in fields]
        truth = stats[model]
        assert (
            (s.generation_tokens, s.prompt_tokens)
            == (truth["completion_tokens"], truth["prompt_tokens"])
            == (72, truth["prompt_tokens"])
        )
        assert s.ttft_buckets[-1] == (float("inf"), truth["ttft_s"]["count"]) == (float("inf"), 6)
        assert s.prefix_cache_queries == truth["prompt_tokens"] and 0 < (s.prefix_cache_hits or 0) < s.prompt_tokens
        assert own[model].ttft_buckets == s.ttft_buckets  # the sim flavour takes TTFT from the vLLM names


def test_a_series_created_mid_run_counts_from_zero() -> None:
    """SGLang creates a labelled counter at its first increment: absent at t0, present at t1."""
    t0 = "\n".join(line for line in body("sglang_dp2_t0.prom").splitlines() if "num_retracted_requests" not in line)
    window = ServerWindow()
    window.add(parse_exposition(t0).samples[DSV3])
    window.add(sample("sglang_dp2_t1.prom"))
    assert window.summary().preemptions == 9 + 3
