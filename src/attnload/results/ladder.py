"""The seed's decode criterion, computed from a context ladder's stages.

"Under long context MLA's tokens/s falls less than GQA's": ``context_scaling`` puts each rung's per-user
decode speed over the shortest rung's (at the same users), and :func:`pair_sentences` says, for each pair
of models, whose fell more, whether that is what their KV bytes per token predict, and when it is not, what
the server view shows instead. Decode and prefill are reported apart: a model may decode better with context
and still prefill far worse.
"""

from __future__ import annotations

from attnload.results.model import ContextPoint, ModelSummary, StageSummary
from attnload.results.truth.evidence import change_interval, overlap, sample_text
from attnload.results.truth.fields import Interval

PREFILL_WORSE_RATIO = 1.5
"""At the longest rung, a TTFT p50 this many times the other model's is called out as a worse prefill."""


def decode_speed(stage: StageSummary) -> float | None:
    """Output tokens/s of one stream: 1 / TPOT p50 (None without a TPOT)."""
    tpot = stage.tpot_s.p50
    return 1.0 / tpot if tpot else None


def context_scaling(stages: list[StageSummary]) -> list[ContextPoint]:
    """Each ladder stage's decode speed per user relative to the shortest context's at the same users."""
    rungs = sorted((s for s in stages if s.context is not None), key=lambda s: (s.users or 0, s.context or 0))
    base: dict[int | None, float | None] = {}
    base_tpot: dict[int | None, Interval | None] = {}
    points = []
    for stage in rungs:
        speed = decode_speed(stage)
        first = base.setdefault(stage.users, speed)
        relative = speed / first if speed is not None and first else None
        tpot = stage.evidence.tpot_p50_s if stage.evidence is not None else None
        first_tpot = base_tpot.setdefault(stage.users, tpot)
        points.append(
            ContextPoint(
                context=stage.context or 0,
                users=stage.users,
                decode_tokens_per_s_per_user=speed,
                relative=relative,
                itl_p50_s=stage.itl_s.p50,
                ttft_p50_s=stage.ttft_s.p50,
                prompt_tokens_p50=stage.prompt_tokens_p50,
                change=change_interval(first_tpot, tpot) if first_tpot and tpot and relative is not None else None,
                ttft=stage.evidence.ttft_p50_s if stage.evidence is not None else None,
            )
        )
    return points


def tokens_label(tokens: int) -> str:
    """``1024`` → ``1K``, ``32768`` → ``32K``, ``1500`` → ``1,500``."""
    if tokens >= 1024 and tokens % 1024 == 0:
        return f"{tokens // 1024}K"
    return f"{tokens:,}"


def _ends(model: ModelSummary) -> tuple[ContextPoint, ContextPoint] | None:
    """The shortest and longest rung at this model's smallest users (None: fewer than two rungs with speeds)."""
    if not model.context_scaling:
        return None
    users = min(p.users or 0 for p in model.context_scaling)
    row = [p for p in model.context_scaling if (p.users or 0) == users and p.relative is not None]
    if len(row) < 2 or row[0].context == row[-1].context:
        return None
    return row[0], row[-1]


def longest_rung(model: ModelSummary) -> ContextPoint | None:
    """The longest rung at the model's fewest users, as the pair sentences read it (None: not a ladder)."""
    ends = _ends(model)
    return ends[1] if ends is not None else None


def _fell(point: ContextPoint) -> str:
    change = 1.0 - (point.relative or 1.0)
    text = f"fell {change:.0%}" if change >= 0 else f"rose {-change:.0%}"
    return text + (f" ({sample_text(point.change)})" if point.change is not None else "")


def _unclear(a: Interval | None, b: Interval | None) -> str | None:
    """Why two figures cannot be told apart at this sample (None: they can, or carry no evidence)."""
    if a is None or b is None:
        return None
    if None in (a.low, a.high, b.low, b.high):
        return "too few requests for a 95 % interval: no clear difference at this sample"
    return "their 95 % intervals overlap: no clear difference at this sample" if overlap(a, b) else None


def _kv(model: ModelSummary) -> float | None:
    value = model.attention_info.get("kv_bytes_per_token")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _server_says(model: ModelSummary, context: int) -> str:
    """What the server view of the longest rung shows (why decode fell, when not the KV reads)."""
    stage = next((s for s in model.stages if s.context == context), None)
    server = stage.server if stage is not None else None
    if server is None:
        return "no server view was read to say why"
    waiting = server.requests_waiting.mean if server.requests_waiting else None
    usage = server.kv_cache_usage.max if server.kv_cache_usage else None
    if waiting is not None and waiting >= 1:
        return f"{model.key}'s requests queued (mean {waiting:.1f} waiting)"
    if usage is not None and usage >= 0.9:
        return f"{model.key}'s KV cache was full ({usage:.0%})"
    if server.preemptions:
        return f"{model.key} preempted {server.preemptions} requests"
    bound = stage.gpu.bound if stage is not None and stage.gpu is not None else None
    if bound == "compute":
        return f"no queue, full cache or preemption at {model.key}; its GPUs were compute-bound: a compute-bound decode"
    return f"no queue, full cache or preemption at {model.key}: its decode step itself grew with context"


_MANY_KV_HEADS = ("MHA", "GQA")
_LATENT = ("MLA", "GLA")


def _kv_order(a: ModelSummary, b: ModelSummary) -> tuple[ModelSummary, ModelSummary, str] | None:
    """(more KV, less KV, the claim) from the simulator preset's KV bytes per token; without them, from the
    attention types alone when one caches per-head keys and values and the other a latent (None: no claim)."""
    kv_a, kv_b = _kv(a), _kv(b)
    if kv_a and kv_b and kv_a != kv_b:
        more, less = (a, b) if kv_a > kv_b else (b, a)
        return more, less, f"{more.key} keeps {max(kv_a, kv_b) / min(kv_a, kv_b):.1f}× more KV bytes per token"
    for more, less in ((a, b), (b, a)):
        if more.attention.upper() in _MANY_KV_HEADS and less.attention.upper() in _LATENT:
            return more, less, f"{more.key} ({more.attention}) keeps more KV bytes per token than a latent cache"
    return None


def pair_sentence(a: ModelSummary, b: ModelSummary) -> str | None:
    """One sentence on how two models' per-user decode speed fell with context (None: no ladder to read)."""
    ends_a, ends_b = _ends(a), _ends(b)
    if ends_a is None or ends_b is None:
        return None
    (lo, hi_a), (_, hi_b) = ends_a, ends_b
    users = f" at {lo.users} user{'s' if lo.users != 1 else ''} per model" if lo.users else ""
    text = (
        f"From {tokens_label(lo.context)} to {tokens_label(hi_a.context)} tokens of context{users}, "
        f"{a.key} ({a.attention})'s per-user decode speed {_fell(hi_a)} and {b.key} ({b.attention})'s {_fell(hi_b)}"
    )
    unclear = _unclear(hi_a.change, hi_b.change)
    kv = _kv_order(a, b)
    if kv is not None:
        more_kv, less_kv, claim = kv
        text += f"; {claim}"
        falls = {a.key: 1.0 - (hi_a.relative or 1.0), b.key: 1.0 - (hi_b.relative or 1.0)}
        if falls[more_kv.key] < falls[less_kv.key] and unclear is None:
            text += (
                f", yet {less_kv.key}'s decode fell more: not what the KV sizes predict here "
                f"({_server_says(less_kv, hi_a.context)})"
            )
    text += f"; {unclear}." if unclear is not None else "."
    return text + _prefill_sentence(a, b, hi_a, hi_b)


def _prefill_sentence(a: ModelSummary, b: ModelSummary, hi_a: ContextPoint, hi_b: ContextPoint) -> str:
    """At the longest rung, a TTFT p50 far above the other's, when the samples can tell them apart."""
    if not hi_a.ttft_p50_s or not hi_b.ttft_p50_s:
        return ""
    (slow, p_slow), (fast, p_fast) = sorted(((a, hi_a), (b, hi_b)), key=lambda mp: -(mp[1].ttft_p50_s or 0.0))
    t_slow, t_fast = p_slow.ttft_p50_s or 0.0, p_fast.ttft_p50_s or 0.0
    if t_slow < PREFILL_WORSE_RATIO * t_fast:
        return ""
    figures = (
        f"at {tokens_label(hi_a.context)} {slow.key}'s TTFT p50 is {t_slow:.2f} s against {fast.key}'s {t_fast:.2f} s"
    )
    if p_slow.ttft is None or p_fast.ttft is None:
        return f" Prefill is another matter: {figures}."
    samples = f"{slow.key} {sample_text(p_slow.ttft, 's')}; {fast.key} {sample_text(p_fast.ttft, 's')}"
    if (unclear := _unclear(p_slow.ttft, p_fast.ttft)) is not None:
        return f" On prefill, {figures} ({samples}): {unclear}."
    return f" Prefill is another matter: {figures} ({samples})."


def pair_sentences(models: list[ModelSummary]) -> list[str]:
    """:func:`pair_sentence` for every pair of models, in config order."""
    sentences = []
    for i, a in enumerate(models):
        for b in models[i + 1 :]:
            if (sentence := pair_sentence(a, b)) is not None:
                sentences.append(sentence)
    return sentences
