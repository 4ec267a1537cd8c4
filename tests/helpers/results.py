"""Results built in tests: a plausible GQA/MLA pair for the report tests, and a bare envelope.

Builds typed objects directly, so tests depend on the results model, not on a run.
"""

from __future__ import annotations

from attnload.results.model import ClientInfo, ModelSummary, Requests, Results, StageSummary, Summary

GQA_INFO: dict[str, float | int | str] = {
    "preset": "llama-3-70b",
    "kv_bytes_per_token": 327680,
    "kv_bytes_per_token_per_gpu": 40960,
    "gpu": "h200",
    "tp": 8,
    "dp_attention": 1,
    "kv_capacity_tokens": 2_150_000,
    "max_seqs_at_8k": 262,
    "simulated": "true",
}
MLA_INFO: dict[str, float | int | str] = {
    "preset": "deepseek-v3",
    "kv_bytes_per_token": 70272,
    "kv_bytes_per_token_per_gpu": 70272,
    "gpu": "h200",
    "tp": 8,
    "dp_attention": 8,
    "kv_capacity_tokens": 5_400_000,
    "max_seqs_at_8k": 659,
    "simulated": "true",
}


def summary(p50_s: float, spread: float = 1.6, count: int = 100) -> Summary:
    """A plausible distribution around ``p50_s``; percentiles rise monotonically up to max."""
    if count == 0:
        return Summary()
    return Summary(
        count=count,
        mean=p50_s * 1.1,
        p50=p50_s,
        p90=p50_s * spread**0.6,
        p95=p50_s * spread**0.8,
        p99=p50_s * spread,
        max=p50_s * spread * 1.2,
    )


def stage(
    index: int,
    users: int,
    ttft_s: float,
    itl_s: float,
    tok_s: float,
    ok: int = 100,
    failed: int = 0,
    errors: dict[str, int] | None = None,
    ttft_spread: float = 1.6,
) -> StageSummary:
    return StageSummary(
        index=index,
        users=users,
        start_s=index * 30.0,
        end_s=(index + 1) * 30.0,
        requests=Requests(ok=ok, failed=failed),
        errors=errors or {},
        ttft_s=summary(ttft_s, ttft_spread, ok),
        itl_s=summary(itl_s, 1.3, ok * 50 if ok else 0),
        tpot_s=summary(itl_s * 1.02, 1.2, ok),
        e2e_s=summary(ttft_s + 100 * itl_s, 1.3, ok),
        prompt_tokens=ok * 512,
        completion_tokens=ok * 128,
        output_tokens_per_s=tok_s,
        requests_per_s=ok / 30.0,
        goodput_rps=(ok * 0.9) / 30.0 if ok else 0.0,
    )


def model(
    key: str,
    attention: str,
    stages: list[StageSummary],
    info: dict[str, float | int | str] | None = None,
    name: str | None = None,
) -> ModelSummary:
    """A model whose totals are taken from its busiest stage (good enough for rendering tests)."""
    ok = sum(s.requests.ok for s in stages)
    failed = sum(s.requests.failed for s in stages)
    errors: dict[str, int] = {}
    for s in stages:
        for k, v in s.errors.items():
            errors[k] = errors.get(k, 0) + v
    busiest = max(stages, key=lambda s: s.requests.ok) if stages else None
    fields = {}
    if busiest is not None and ok:
        fields = dict(ttft_s=busiest.ttft_s, itl_s=busiest.itl_s, tpot_s=busiest.tpot_s, e2e_s=busiest.e2e_s)
    return ModelSummary(
        key=key,
        model=name or key,
        attention=attention,
        stages=stages,
        attention_info=info or {},
        requests=Requests(ok=ok, failed=failed),
        errors=errors,
        prompt_tokens=ok * 512,
        completion_tokens=ok * 128,
        output_tokens_per_s=sum(s.output_tokens_per_s for s in stages) / max(len(stages), 1),
        requests_per_s=ok / 120.0,
        goodput_rps=(ok * 0.9) / 120.0 if ok else None,
        **fields,
    )


def gqa_model() -> ModelSummary:
    """llama-3-70b: fast at low load, TTFT explodes past its KV capacity in the last stage."""
    return model(
        "llama-3-70b",
        "gqa",
        [
            stage(0, 1, 0.050, 0.010, 95.0),
            stage(1, 8, 0.055, 0.011, 700.0),
            stage(2, 64, 0.080, 0.016, 3900.0, failed=2, errors={"timeout": 2}),
            stage(3, 256, 1.900, 0.030, 4300.0, ttft_spread=3.0, failed=9, errors={"timeout": 6, "server": 3}),
        ],
        GQA_INFO,
        name="Meta-Llama-3-70B-Instruct",
    )


def mla_model() -> ModelSummary:
    """deepseek-v3: slower single stream (DP attention), flat TTFT to the end."""
    return model(
        "deepseek-v3",
        "mla",
        [
            stage(0, 1, 0.070, 0.014, 70.0),
            stage(1, 8, 0.072, 0.015, 520.0),
            stage(2, 64, 0.078, 0.017, 3700.0),
            stage(3, 256, 0.090, 0.021, 11800.0),
        ],
        MLA_INFO,
        name="deepseek-chat",
    )


def failed_model() -> ModelSummary:
    """Every request failed (bad key): no latencies at all."""
    return model(
        "broken",
        "gqa",
        [
            stage(i, users, 0.0, 0.0, 0.0, ok=0, failed=20 * (i + 1), errors={"auth": 20 * (i + 1)})
            for i, users in enumerate((1, 8, 64, 256))
        ],
    )


def zero_stage_model() -> ModelSummary:
    """A stage that completed nothing (e.g. cut short), between two normal ones."""
    return model(
        "qwen2.5-72b",
        "gqa",
        [
            stage(0, 1, 0.052, 0.010, 90.0),
            stage(1, 8, 0.0, 0.0, 0.0, ok=0),
            stage(2, 64, 0.090, 0.017, 3500.0),
        ],
    )


def results(*models: ModelSummary, saturated: bool = False, started: str = "2025-01-01T00:00:00Z") -> Results:
    return Results(
        started_at=started,
        ended_at="2025-01-01T00:02:00Z",
        duration_s=120.0,
        config_sha256="ab" * 32,
        config={"source": "examples/benchmark_config.json", "shape": "concurrency:1,8,64,256", "stage_duration_s": 30},
        client=ClientInfo(
            workers=2,
            cpu_max_ratio=0.95 if saturated else 0.4,
            client_saturated=saturated,
            saturation_reasons=["worker-1 CPU 95%"] if saturated else [],
        ),
        models=list(models) or [gqa_model(), mla_model()],
    )


def pair() -> Results:
    return results(gqa_model(), mla_model())


def envelope(*models: ModelSummary, client: ClientInfo | None = None) -> Results:
    """One minute, no config: for tests of what reads only the models and the client."""
    return Results(
        started_at="2026-01-01T00:00:00Z",
        ended_at="2026-01-01T00:01:00Z",
        duration_s=60.0,
        config_sha256="0" * 64,
        models=list(models),
        client=client or ClientInfo(),
    )
