"""Writes tests/data/scrape/*.prom as vLLM and SGLang render them: `python generate.py .`

Why generated: no real vLLM or SGLang server runs here (no GPU). The bodies are rendered by
prometheus_client, the library both servers use, with the metric names, HELP texts, label
names and bucket bounds copied from their sources (vllm/v1/metrics/loggers.py,
sglang/srt/metrics/collector.py and the scheduler's label set). Values are chosen so tests
can assert exact aggregates; `_created` timestamps are pinned so regeneration is stable.
"""

import re
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFT_V = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
ITL_V = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
REQ_V = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]
NOISE = """# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 18532.0
python_gc_objects_collected_total{generation="1"} 4021.0
python_gc_objects_collected_total{generation="2"} 712.0
# HELP python_info Python platform information
# TYPE python_info gauge
python_info{implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"} 1.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 4.312662016e+09
"""


def set_hist(h, labels, cum, total_sum):
    """Fill a prometheus_client histogram child so its cumulative buckets are exactly ``cum``
    ({upper: cumulative}) — observations placed at bucket upper bounds, then the sum fixed."""
    child = h.labels(*labels)
    prev = 0
    bounds = child._upper_bounds
    for i, b in enumerate(bounds):
        c = cum.get(b, prev) if b != float("inf") else cum.get(b, prev)
        child._buckets[i].set(c - prev)
        prev = c
    child._sum.set(total_sum)


def cum_of(spec, bounds, total):
    """spec: {bound: cumulative} for the bounds that change; others carry the last value."""
    out, last = {}, 0
    for b in bounds + [float("inf")]:
        last = spec.get(b, last)
        out[b] = last
    out[float("inf")] = total
    return out


def fix_created(text):
    return re.sub(r"(_created\{[^}]*\}) [0-9.e+]+", r"\1 1.7579e+09", text)


def vllm_v1(engines, model):
    r = CollectorRegistry()
    L = ["model_name", "engine"]
    g_run = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", L, registry=r)
    g_wait = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", L, registry=r)
    g_gpu = Gauge(
        "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
        L,
        registry=r,
    )
    c_gq = Counter(
        "vllm:gpu_prefix_cache_queries",
        "GPU prefix cache queries, in terms of number of queriedtokens. "
        "DEPRECATED: Use vllm:prefix_cache_queries instead.",
        L,
        registry=r,
    )
    c_gh = Counter(
        "vllm:gpu_prefix_cache_hits",
        "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.",
        L,
        registry=r,
    )
    g_kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", L, registry=r)
    c_q = Counter(
        "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", L, registry=r
    )
    c_h = Counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", L, registry=r)
    c_pre = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", L, registry=r)
    c_p = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", L, registry=r)
    c_g = Counter("vllm:generation_tokens", "Number of generation tokens processed.", L, registry=r)
    c_ok = Counter(
        "vllm:request_success", "Count of successfully processed requests.", L + ["finished_reason"], registry=r
    )
    h_ttft = Histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        L,
        buckets=TTFT_V,
        registry=r,
    )
    h_tpot = Histogram(
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
        L,
        buckets=ITL_V,
        registry=r,
    )
    h_itl = Histogram(
        "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", L, buckets=ITL_V, registry=r
    )
    h_e2e = Histogram(
        "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", L, buckets=REQ_V, registry=r
    )
    h_q = Histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        L,
        buckets=REQ_V,
        registry=r,
    )
    for eng, v in engines.items():
        lab = (model, eng)
        g_run.labels(*lab).set(v["running"])
        g_wait.labels(*lab).set(v["waiting"])
        g_gpu.labels(*lab).set(v["kv"])
        g_kv.labels(*lab).set(v["kv"])
        for c, k in (
            (c_gq, "queries"),
            (c_q, "queries"),
            (c_gh, "hits"),
            (c_h, "hits"),
            (c_pre, "preempt"),
            (c_p, "prompt"),
            (c_g, "gen"),
        ):
            c.labels(*lab).inc(v[k])
        for reason in ("stop", "length", "abort"):
            c_ok.labels(*lab, reason).inc(v["finished"] if reason == "length" else 0)
        set_hist(h_ttft, lab, cum_of(v["ttft"], TTFT_V, v["ttft_n"]), v["ttft_sum"])
        itl = cum_of({0.025: v["gen"] * 0.7, 0.05: v["gen"] * 0.95}, ITL_V, v["gen"])
        set_hist(h_tpot, lab, itl, v["gen"] * 0.024)
        set_hist(h_itl, lab, itl, v["gen"] * 0.024)
        set_hist(h_e2e, lab, cum_of({10.0: v["finished"]}, REQ_V, v["finished"]), v["finished"] * 7.5)
        set_hist(h_q, lab, cum_of({0.3: v["q_n"]}, REQ_V, v["q_n"]), v["q_sum"])
    info = Gauge(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        ["block_size", "cache_dtype", "enable_prefix_caching", "engine", "gpu_memory_utilization", "num_gpu_blocks"],
        registry=r,
    )
    for eng in engines:
        info.labels("16", "auto", "True", eng, "0.9", "41273").set(1)
    return NOISE + fix_created(generate_latest(r).decode())


def vllm_v0(v, model):
    """vLLM 0.6-style (V0 engine): labels model_name only, gpu_cache_usage_perc, hit-rate gauge."""
    r = CollectorRegistry()
    L = ["model_name"]
    Gauge("vllm:num_requests_running", "Number of requests currently running on GPU.", L, registry=r).labels(model).set(
        v["running"]
    )
    Gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", L, registry=r).labels(model).set(0)
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", L, registry=r).labels(model).set(
        v["waiting"]
    )
    Gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", L, registry=r).labels(
        model
    ).set(v["kv"])
    Gauge("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", L, registry=r).labels(
        model
    ).set(0)
    Gauge("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", L, registry=r).labels(model).set(
        v["hit_rate"]
    )
    Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", L, registry=r).labels(
        model
    ).inc(v["preempt"])
    Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", L, registry=r).labels(model).inc(v["prompt"])
    Counter("vllm:generation_tokens", "Number of generation tokens processed.", L, registry=r).labels(model).inc(
        v["gen"]
    )
    h = Histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        L,
        buckets=TTFT_V,
        registry=r,
    )
    set_hist(h, (model,), cum_of(v["ttft"], TTFT_V, v["ttft_n"]), v["ttft_sum"])
    return fix_created(generate_latest(r).decode())


SG_TTFT = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SG_ITL = [
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.000,
    2.000,
    4.000,
    6.000,
    8.000,
]
SG_Q = [
    0.0,
    0.1,
    0.2,
    0.5,
    1,
    2,
    3,
    4,
    5,
    10,
    15,
    20,
    30,
    40,
    50,
    60,
    70,
    80,
    90,
    100,
    200,
    300,
    400,
    500,
    600,
    700,
    800,
    900,
    1000,
    1200,
    1400,
    1600,
    1800,
    2000,
    2500,
    3000,
]


def sglang(ranks, tok, model):
    """ranks: {(tp_rank, dp_rank): scheduler values}; tok: tokenizer-manager values."""
    r = CollectorRegistry()
    S = ["model_name", "engine_type", "tp_rank", "pp_rank", "dp_rank"]
    gs = {
        name: Gauge(name, doc, S, multiprocess_mode="mostrecent", registry=r)
        for name, doc in (
            ("sglang:num_running_reqs", "The number of running requests."),
            ("sglang:num_used_tokens", "The number of used tokens."),
            ("sglang:token_usage", "The token usage."),
            ("sglang:gen_throughput", "The generation throughput (token/s)."),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
            ("sglang:cache_hit_rate", "The prefix cache hit rate."),
            ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
            ("sglang:num_retracted_reqs", "The number of retracted requests."),
        )
    }
    c_ret = Counter("sglang:num_retracted_requests", "Total number of retracted requests.", S, registry=r)
    h_q = Histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.", S, buckets=SG_Q, registry=r)
    for (tp, dp), v in ranks.items():
        lab = (model, "unified", str(tp), "0", str(dp))
        for name, key in (
            ("sglang:num_running_reqs", "running"),
            ("sglang:num_used_tokens", "used"),
            ("sglang:token_usage", "usage"),
            ("sglang:gen_throughput", "tput"),
            ("sglang:num_queue_reqs", "queue"),
            ("sglang:cache_hit_rate", "hit_rate"),
            ("sglang:max_total_num_tokens", "max_tokens"),
            ("sglang:num_retracted_reqs", "retracted_now"),
        ):
            gs[name].labels(*lab).set(v[key])
        c_ret.labels(*lab).inc(v["retracted"])
        set_hist(h_q, lab, cum_of({0.5: v["q_n"]}, SG_Q, v["q_n"]), v["q_sum"])
    T = ["model_name"]
    Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", T, registry=r).labels(model).inc(
        tok["prompt"]
    )
    Counter("sglang:generation_tokens", "Number of generation tokens processed.", T, registry=r).labels(model).inc(
        tok["gen"]
    )
    Counter("sglang:cached_tokens", "Number of cached prompt tokens.", T, registry=r).labels(model).inc(tok["cached"])
    Counter("sglang:num_requests", "Number of requests processed.", T, registry=r).labels(model).inc(tok["requests"])
    Counter("sglang:num_aborted_requests", "Number of requests aborted.", T, registry=r).labels(model).inc(0)
    h = Histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        T,
        buckets=SG_TTFT,
        registry=r,
    )
    set_hist(h, (model,), cum_of(tok["ttft"], SG_TTFT, tok["requests"]), tok["ttft_sum"])
    hi = Histogram(
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        T,
        buckets=SG_ITL,
        registry=r,
    )
    set_hist(hi, (model,), cum_of({0.02: tok["gen"] * 0.9}, SG_ITL, tok["gen"]), tok["gen"] * 0.018)
    he = Histogram(
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        T,
        buckets=[0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400],
        registry=r,
    )
    set_hist(he, (model,), cum_of({10: tok["requests"]}, [10], tok["requests"]), tok["requests"] * 6.0)
    return fix_created(generate_latest(r).decode())


LLAMA = "meta-llama/Llama-3.3-70B-Instruct"


def v1(running, waiting, kv, preempt, queries, hits, prompt, gen, ttft, ttft_n, ttft_sum, q_n, q_sum, finished):
    return dict(
        running=running,
        waiting=waiting,
        kv=kv,
        preempt=preempt,
        queries=queries,
        hits=hits,
        prompt=prompt,
        gen=gen,
        ttft=ttft,
        ttft_n=ttft_n,
        ttft_sum=ttft_sum,
        q_n=q_n,
        q_sum=q_sum,
        finished=finished,
    )


BASE_TTFT = {0.1: 20, 0.25: 60, 0.5: 90, 0.75: 100}
files = {
    "vllm_v1_t0.prom": vllm_v1(
        {"0": v1(12, 0, 0.25, 4, 10000, 2500, 10000, 50000, BASE_TTFT, 100, 30.0, 100, 5.0, 95)}, LLAMA
    ),
    "vllm_v1_t1.prom": vllm_v1(
        {
            "0": v1(
                64,
                7,
                0.97,
                9,
                30000,
                6500,
                30000,
                90000,
                {**BASE_TTFT, 1.0: 180, 2.5: 290, 5.0: 300},
                300,
                330.0,
                300,
                65.0,
                290,
            )
        },
        LLAMA,
    ),
    "vllm_restart_before.prom": vllm_v1(
        {
            "0": v1(
                40,
                3,
                0.9,
                20,
                50000,
                10000,
                50000,
                150000,
                {**BASE_TTFT, 1.0: 250, 2.5: 390, 5.0: 400},
                400,
                500.0,
                400,
                90.0,
                390,
            )
        },
        LLAMA,
    ),
    "vllm_restart_after.prom": vllm_v1(
        {"0": v1(2, 0, 0.05, 1, 2000, 1000, 2000, 6000, {0.5: 5, 1.0: 10}, 10, 6.0, 10, 0.5, 8)}, LLAMA
    ),
    "vllm_dp2.prom": vllm_v1(
        {
            "0": v1(10, 1, 0.5, 3, 8000, 2000, 8000, 20000, {0.1: 10, 0.25: 40}, 40, 6.0, 40, 2.0, 35),
            "1": v1(14, 2, 0.7, 5, 12000, 1000, 12000, 30000, {0.1: 30, 0.25: 50, 0.5: 60}, 60, 12.0, 60, 3.0, 55),
        },
        "deepseek-ai/DeepSeek-V3",
    ),
    "vllm_v0_gpu_cache.prom": vllm_v0(
        dict(
            running=7,
            waiting=2,
            kv=0.42,
            hit_rate=0.31,
            preempt=3,
            prompt=4096,
            gen=8192,
            ttft={0.1: 5, 0.25: 9, 0.5: 10},
            ttft_n=10,
            ttft_sum=1.4,
        ),
        "llama-3-70b",
    ),
}


def sched(running, queue, usage, hit, retracted, q_n):
    return dict(
        running=running,
        used=int(usage * 500000),
        usage=usage,
        tput=1500.0,
        queue=queue,
        hit_rate=hit,
        max_tokens=500000,
        retracted_now=0,
        retracted=retracted,
        q_n=q_n,
        q_sum=q_n * 0.25,
    )


files["sglang_dp2_t0.prom"] = sglang(
    {(0, 0): sched(30, 4, 0.8, 0.5, 6, 100), (1, 1): sched(26, 0, 0.4, 0.3, 1, 90)},
    dict(
        prompt=120000, gen=60000, cached=48000, requests=190, ttft={0.2: 50, 0.4: 150, 0.6: 180, 1: 190}, ttft_sum=60.0
    ),
    "deepseek-ai/DeepSeek-V3",
)
files["sglang_dp2_t1.prom"] = sglang(
    {(0, 0): sched(40, 12, 0.95, 0.45, 9, 150), (1, 1): sched(38, 9, 0.91, 0.35, 3, 140)},
    dict(
        prompt=220000,
        gen=100000,
        cached=78000,
        requests=290,
        ttft={0.2: 50, 0.4: 150, 0.6: 180, 1: 190, 2: 240, 4: 290},
        ttft_sum=260.0,
    ),
    "deepseek-ai/DeepSeek-V3",
)
files["sglang_tp_all_schedulers.prom"] = sglang(
    {(0, 0): sched(5, 1, 0.6, 0.2, 2, 10), (1, 0): sched(5, 1, 0.6, 0.2, 2, 10)},
    dict(prompt=1000, gen=2000, cached=100, requests=10, ttft={0.2: 10}, ttft_sum=1.0),
    "Qwen/Qwen2.5-7B-Instruct",
)
if __name__ == "__main__":
    for name, text in files.items():
        (Path(sys.argv[1]) / name).write_text(text)
        print(name, len(text))
