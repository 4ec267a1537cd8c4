"""Offline throughput on the virtual clock: ``attnload sim --throughput``, the counterpart of
``vllm bench throughput`` and ``trtllm-bench throughput``.

``num_prompts`` identical requests (``input_len`` prompt tokens, exactly ``output_len``
output tokens, unique prompts so the prefix cache never hits) go to one served model; with
``max_concurrency`` C only C are in flight and the next is sent the instant one finishes
(trtllm-bench's ``--concurrency``), otherwise all arrive at t = 0 (``vllm bench
throughput``). The same :class:`Scheduler` that serves HTTP runs every step; stretches of
pure decode in which nothing can change run in bulk (``Scheduler.fast_forward``), so a
1024-way, 5120-prompt run costs seconds of CPU, not minutes. Percentiles come from the
project's log histogram (≤ 1 % relative error).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import asdict, dataclass

from attnload.errors import UsageError
from attnload.measure.histogram import LogHistogram
from attnload.sim.costmodel import Deployment
from attnload.sim.scheduler import Scheduler, SimSequence

_FOLD_GAPS_AT = 4096
_FAST_FORWARD_STEPS = 1 << 30


@dataclass(frozen=True)
class ThroughputResult:
    """What an offline run measured; seconds are simulated time."""

    model: str
    engine: str
    gpu: str
    tp: int
    dp_attention: int
    ep: int
    kv_dtype: str
    num_prompts: int
    input_len: int
    output_len: int
    max_concurrency: int | None
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    ttft_mean_s: float
    ttft_p50_s: float
    ttft_p99_s: float
    itl_p50_s: float
    itl_p99_s: float
    tpot_mean_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    max_running: int
    preemptions: int
    steps: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _q(hist: LogHistogram, q: float) -> float:
    value = hist.quantile(q)
    return float(value) if value is not None else 0.0


def _check_request_fits(
    dep: Deployment, input_len: int, output_len: int, num_prompts: int, max_concurrency: int | None
) -> None:
    """Refuse, as one usage line, a run the deployment cannot serve at all."""
    if input_len < 1 or output_len < 1 or num_prompts < 1:
        raise UsageError("--input-len, --output-len and --num-prompts must be ≥ 1")
    if max_concurrency is not None and max_concurrency < 1:
        raise UsageError("--max-concurrency must be ≥ 1")
    total = input_len + output_len
    if total > dep.preset.max_model_len:
        raise UsageError(
            f"{dep.preset.key}: input ({input_len}) + output ({output_len}) tokens exceed "
            f"max_model_len {dep.preset.max_model_len}"
        )
    if total + dep.cfg.block_size > dep.group_kv_tokens:
        raise UsageError(
            f"{dep.preset.key}: one request of {total} tokens does not fit one attention group's KV "
            f"({dep.group_kv_tokens} tokens). Fix: shorter --input-len/--output-len, a larger --tp "
            f"or --gpu-memory-utilization"
        )


def run_throughput(
    dep: Deployment,
    input_len: int,
    output_len: int,
    num_prompts: int,
    max_concurrency: int | None = None,
    *,
    model: str | None = None,
    fast_forward: bool = True,
) -> ThroughputResult:
    """Run ``num_prompts`` requests to completion and summarise (see the module docstring)."""
    _check_request_fits(dep, input_len, output_len, num_prompts, max_concurrency)
    ids = itertools.count()
    ttft, tpot, itl = LogHistogram(), LogHistogram(), LogHistogram()
    pending = num_prompts
    completed = 0
    now_s = 0.0
    arrivals: deque[float] = deque()

    def submit(at_s: float) -> None:
        nonlocal pending
        pending -= 1
        sched.submit(SimSequence(f"r{next(ids)}", input_len, output_len), at_s)

    def on_tokens(seq: SimSequence, n: int) -> None:
        pass

    def on_finish(seq: SimSequence) -> None:
        nonlocal completed
        completed += 1
        assert seq.first_token_s is not None
        ttft.record(max(seq.first_token_s - seq.arrival_s, 0.0))
        if seq.max_tokens > 1:
            tpot.record((seq.last_token_s - seq.first_token_s) / (seq.max_tokens - 1))
        if pending > 0:
            arrivals.append(now_s)

    sched = Scheduler(dep, on_tokens, on_finish)
    gaps: list[float] = []
    sched.scheduled_gaps = gaps
    for _ in range(min(num_prompts, max_concurrency or num_prompts)):
        submit(0.0)
    max_running = steps = 0

    def on_step(step_s: float, decodes: int) -> None:
        itl.record(step_s, decodes)

    while completed < num_prompts:
        while arrivals:
            submit(arrivals.popleft())
        if fast_forward:
            before = sched.steps_fast_forwarded
            end_s = sched.fast_forward(now_s, _FAST_FORWARD_STEPS, on_step)
            if end_s != now_s:
                steps += sched.steps_fast_forwarded - before
                now_s = end_s
                continue
        step_s = sched.plan(now_s)
        if step_s is None:
            raise RuntimeError("offline run stalled with work left")  # pragma: no cover - a scheduler bug
        max_running = max(max_running, sched.running)
        now_s += step_s
        steps += 1
        sched.complete(now_s)
        if len(gaps) >= _FOLD_GAPS_AT:
            itl.record_pairs(zip(gaps, itertools.repeat(1)))
            gaps.clear()
    itl.record_pairs(zip(gaps, itertools.repeat(1)))
    counts = (max_running, sched.preemptions_total, steps)
    return _result(dep, model, (num_prompts, input_len, output_len, max_concurrency), now_s, (ttft, tpot, itl), counts)


def _result(
    dep: Deployment,
    model: str | None,
    requests: tuple[int, int, int, int | None],
    duration_s: float,
    latencies: tuple[LogHistogram, LogHistogram, LogHistogram],
    counts: tuple[int, int, int],
) -> ThroughputResult:
    """The summary of a finished run: ``requests`` is (num_prompts, input_len, output_len, max_concurrency),
    ``latencies`` (TTFT, TPOT, ITL) and ``counts`` (max running, preemptions, steps)."""
    num_prompts, input_len, output_len, max_concurrency = requests
    ttft, tpot, itl = latencies
    max_running, preemptions, steps = counts
    out_tokens = num_prompts * output_len
    return ThroughputResult(
        model=model or dep.preset.key,
        engine=dep.cfg.engine,
        gpu=dep.cfg.gpu,
        tp=dep.cfg.tp,
        dp_attention=dep.dp,
        ep=dep.cfg.ep,
        kv_dtype=dep.cfg.kv_dtype,
        num_prompts=num_prompts,
        input_len=input_len,
        output_len=output_len,
        max_concurrency=max_concurrency,
        duration_s=duration_s,
        requests_per_s=num_prompts / duration_s,
        output_tokens_per_s=out_tokens / duration_s,
        total_tokens_per_s=(out_tokens + num_prompts * input_len) / duration_s,
        ttft_mean_s=ttft.total / ttft.count,
        ttft_p50_s=_q(ttft, 0.5),
        ttft_p99_s=_q(ttft, 0.99),
        itl_p50_s=_q(itl, 0.5),
        itl_p99_s=_q(itl, 0.99),
        tpot_mean_s=tpot.total / tpot.count if tpot.count else 0.0,
        tpot_p50_s=_q(tpot, 0.5),
        tpot_p99_s=_q(tpot, 0.99),
        max_running=max_running,
        preemptions=preemptions,
        steps=steps,
    )


def render_throughput(dep: Deployment, r: ThroughputResult) -> str:
    """The text ``attnload sim --throughput`` prints for one model."""
    cfg = dep.cfg
    conc = f"max concurrency {r.max_concurrency}" if r.max_concurrency else "all at t=0"
    return "\n".join(
        [
            f"{r.model}: preset {dep.preset.key} ({dep.preset.attention}) on {cfg.tp}×{cfg.gpu}, tp {cfg.tp}, "
            f"dp_attention {dep.dp}, ep {cfg.ep}, {cfg.weight_dtype} weights, {cfg.kv_dtype} KV, engine {cfg.engine} "
            f"(simulated, virtual clock)",
            f"  {r.num_prompts} prompts × {r.input_len} in / {r.output_len} out, {conc}: "
            f"{r.duration_s:.1f} s simulated, {r.steps} steps",
            f"  requests/s        {r.requests_per_s:,.2f}",
            f"  output tok/s      {r.output_tokens_per_s:,.0f}",
            f"  total tok/s       {r.total_tokens_per_s:,.0f}",
            f"  TTFT p50 / p99    {r.ttft_p50_s:.3f} / {r.ttft_p99_s:.3f} s (mean {r.ttft_mean_s:.3f})",
            f"  ITL  p50 / p99    {r.itl_p50_s * 1e3:.2f} / {r.itl_p99_s * 1e3:.2f} ms",
            f"  TPOT p50 / p99    {r.tpot_p50_s * 1e3:.2f} / {r.tpot_p99_s * 1e3:.2f} ms",
            f"  peak running      {r.max_running} sequences (KV capacity {dep.kv_capacity_tokens:,} tokens)",
            f"  preemptions       {r.preemptions}",
        ]
    )
