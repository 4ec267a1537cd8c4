"""Plain-language explanation of why the models behaved differently, from the results alone.

The HTML report and the terminal both print these sentences. They are built from
``ModelSummary.attention_info`` (what the attention mechanism costs in KV memory, from
the simulator presets) and the measured per-stage numbers; every claim is guarded by
the numbers that support it, so a run that shows no knee does not get a story about one.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnload.report.fmt import count, kib, ms, rate, series_name, stage_label
from attnload.report.gpu import measured_gpu
from attnload.report.server import measured_state
from attnload.results.model import ModelSummary, Results, StageSummary

MIXED_MODELS_NOTE = "models differ in size and MoE as well as attention"

RISE_FACTOR = 3.0
"""TTFT p99 growing this much from the first to the last loaded stage counts as a knee."""
FLAT_FACTOR = 1.5

_WHY_KV = {
    "gqa": "keeps a key and a value vector for each of its few KV heads in every layer",
    "mha": "keeps a key and a value vector for every attention head in every layer",
    "mqa": "shares a single key/value head among all query heads",
    "mla": "caches one compressed latent vector per token (plus a small RoPE key) that all heads expand on the fly",
    "gta": "ties keys and values into one shared state per KV head, about half of GQA's cache",
    "gla": "splits MLA's latent into a few heads so it can be sharded across GPUs",
}


def _info_num(model: ModelSummary, key: str) -> float | None:
    value = model.attention_info.get(key)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


def presets_differ(results: Results) -> bool:
    """True when the models map to different simulator presets (so size/MoE differ too)."""
    presets = {str(m.attention_info["preset"]) for m in results.models if "preset" in m.attention_info}
    return len(presets) > 1


def _truthy(value: object) -> bool:
    """``simulated`` may arrive as a bool, 1 or a string, depending on who wrote the file."""
    return value is True or value == 1 or (isinstance(value, str) and value.lower() in {"true", "yes", "1"})


def is_simulated(results: Results) -> bool:
    return any(_truthy(m.attention_info.get("simulated")) for m in results.models)


def attention_facts(model: ModelSummary) -> list[tuple[str, str]]:
    """Label/value pairs for a model's attention card; only the keys the results hold."""
    info = model.attention_info
    facts: list[tuple[str, str]] = [("attention", model.attention.upper())]
    if "preset" in info:
        facts.append(("preset", str(info["preset"])))
    if "kv_bytes_per_token" in info:
        facts.append(("KV per token (all GPUs)", kib(info["kv_bytes_per_token"])))
    if "kv_bytes_per_token_per_gpu" in info:
        facts.append(("KV per token per GPU", kib(info["kv_bytes_per_token_per_gpu"])))
    if "gpu" in info or "tp" in info:
        gpu = str(info.get("gpu", "GPU"))
        tp = info.get("tp")
        facts.append(("hardware", f"{tp}× {gpu}" if tp is not None else gpu))
    if "dp_attention" in info:
        facts.append(("DP attention groups", str(info["dp_attention"])))
    if "kv_capacity_tokens" in info:
        facts.append(("KV capacity", f"{count(info['kv_capacity_tokens'])} tokens"))
    if "max_seqs_at_8k" in info:
        facts.append(("8K sequences that fit", count(info["max_seqs_at_8k"])))
    if _truthy(info.get("simulated")):
        facts.append(("source", "attnload simulator"))
    return facts


def model_paragraph(model: ModelSummary) -> str:
    """What this model's attention stores per token and how it is spread over GPUs."""
    name = series_name(model)
    parts: list[str] = []
    why = _WHY_KV.get(model.attention.lower())
    kv = _info_num(model, "kv_bytes_per_token")
    if kv is not None:
        parts.append(f"{name} stores {kib(kv)} of KV cache per token" + (f": it {why}." if why else "."))
    elif why:
        parts.append(f"{name} {why}.")
    tp = _info_num(model, "tp")
    dp = _info_num(model, "dp_attention")
    per_gpu = _info_num(model, "kv_bytes_per_token_per_gpu")
    gpu = str(model.attention_info.get("gpu", "GPU"))
    if tp is not None and tp > 1:
        if dp is not None and dp > 1:
            parts.append(
                f"On {tp:.0f}× {gpu} it runs DP attention in {dp:.0f} groups: each GPU holds only its own "
                f"sequences' KV"
                + (f" ({kib(per_gpu)} per token)" if per_gpu is not None else "")
                + ", so capacity grows with the group count instead of with head sharding."
            )
        else:
            parts.append(
                f"On {tp:.0f}× {gpu} tensor parallelism splits each token's KV across the GPUs"
                + (f" ({kib(per_gpu)} per GPU)" if per_gpu is not None else "")
                + "."
            )
    cap = _info_num(model, "kv_capacity_tokens")
    seqs = _info_num(model, "max_seqs_at_8k")
    if cap is not None:
        parts.append(
            f"That leaves room for {count(cap)} tokens of KV"
            + (f", about {seqs:.0f} concurrent sequences of 8K tokens." if seqs is not None else ".")
        )
    elif seqs is not None:
        parts.append(f"About {seqs:.0f} concurrent sequences of 8K tokens fit.")
    if model.requests.ok == 0:
        errors = ", ".join(f"{k} {v}" for k, v in sorted(model.errors.items())) or "no requests completed"
        parts.append(f"It returned no successful responses ({errors}), so there is nothing measured to compare.")
    return " ".join(parts)


@dataclass(frozen=True)
class _Knee:
    model: ModelSummary
    first: StageSummary
    last: StageSummary
    factor: float


def _knee(model: ModelSummary) -> _Knee | None:
    loaded = [s for s in model.stages if s.ttft_s.count > 0 and s.ttft_s.p99 is not None]
    if len(loaded) < 2 or len({s.context for s in loaded}) > 1:
        return None  # a context ladder's TTFT grows with the prompt, not the load: no knee to read
    first, last = loaded[0], loaded[-1]
    assert first.ttft_s.p99 is not None and last.ttft_s.p99 is not None
    if first.ttft_s.p99 <= 0:
        return None
    return _Knee(model, first, last, last.ttft_s.p99 / first.ttft_s.p99)


def _kv_comparison(models: list[ModelSummary]) -> str | None:
    known = [(m, _info_num(m, "kv_bytes_per_token")) for m in models]
    sized = sorted(((m, kv) for m, kv in known if kv), key=lambda pair: pair[1])
    if len(sized) < 2:
        return None
    (small, small_kv), (big, big_kv) = sized[0], sized[-1]
    text = (
        f"{series_name(big)} stores {big_kv / small_kv:.1f}× more KV per token than {series_name(small)} "
        f"({kib(big_kv)} vs {kib(small_kv)})."
    )
    small_seqs, big_seqs = _info_num(small, "max_seqs_at_8k"), _info_num(big, "max_seqs_at_8k")
    if small_seqs is not None and big_seqs is not None:
        gpu = small.attention_info.get("gpu") or big.attention_info.get("gpu")
        where = f" on the configured {gpu}" if gpu else ""
        text += (
            f" At 8K tokens per sequence{where}, {small.key} fits {small_seqs:.0f} sequences "
            f"and {big.key} fits {big_seqs:.0f}."
        )
    return text


def _measured(models: list[ModelSummary]) -> list[str]:
    knees = [k for k in (_knee(m) for m in models) if k is not None]
    if not knees:
        return []
    out: list[str] = []
    rising = [k for k in knees if k.factor >= RISE_FACTOR]
    flat = [k for k in knees if k.factor < FLAT_FACTOR]

    def describe(k: _Knee) -> str:
        return (
            f"{series_name(k.model)}'s TTFT p99 went from {ms(k.first.ttft_s.p99)} at {stage_label(k.first)} "
            f"to {ms(k.last.ttft_s.p99)} at {stage_label(k.last)} (×{k.factor:.1f})"
        )

    if rising and flat:
        out.append(
            "Measured: "
            + "; ".join(describe(k) for k in rising)
            + ", while "
            + " and ".join(f"{series_name(k.model)} stayed within ×{k.factor:.1f}" for k in flat)
            + ". "
            "A first token that arrives later and later as users are added means new requests waited for "
            "KV space: " + ", ".join(k.model.key for k in rising) + " hit its KV capacity first."
        )
    elif rising:
        out.append(
            "Measured: " + "; ".join(describe(k) for k in knees) + ". Every model passed its knee "
            "in this sweep; the one whose TTFT rose later held more sequences in its KV cache."
        )
    else:
        out.append(
            "Measured: no model's TTFT p99 rose more than ×" + f"{max(k.factor for k in knees):.1f}"
            " across the stages, so the sweep stayed below every model's KV capacity; raise the "
            "concurrency to find the knee."
        )
    lasts = [k for k in knees if k.last.output_tokens_per_s > 0]
    if len(lasts) > 1:
        out.append(
            "In the last stage: "
            + ", ".join(
                f"{k.model.key} produced {rate(k.last.output_tokens_per_s)} output tok/s at {stage_label(k.last)}"
                for k in lasts
            )
            + "."
        )
    firsts = [k for k in knees if k.first.itl_s.p50 is not None]
    if len(firsts) > 1:
        slowest = max(firsts, key=lambda k: k.first.itl_s.p50 or 0.0)
        fastest = min(firsts, key=lambda k: k.first.itl_s.p50 or 0.0)
        dp = _info_num(slowest.model, "dp_attention")
        if slowest is not fastest:
            text = (
                f"At the lightest load, ITL p50 was {ms(slowest.first.itl_s.p50)} for {slowest.model.key} vs "
                f"{ms(fastest.first.itl_s.p50)} for {fastest.model.key}"
            )
            if dp is not None and dp > 1:
                text += (
                    ": DP attention trades single-stream speed for capacity, since one GPU runs all heads "
                    "of its own sequences"
                )
            out.append(text + ".")
    return out


def explain(results: Results) -> list[str]:
    """Paragraphs, most important first: per-model KV facts, the comparison, the measurement."""
    paragraphs = [p for p in (model_paragraph(m) for m in results.models) if p]
    comparison = _kv_comparison(results.models)
    if comparison:
        paragraphs.append(comparison)
    paragraphs.extend(_measured([m for m in results.models if m.requests.ok > 0]))
    paragraphs.extend(measured_state(results))
    paragraphs.extend(measured_gpu(results))
    if presets_differ(results):
        paragraphs.append(f"Caveat: the {MIXED_MODELS_NOTE}, so not every difference is the attention's doing.")
    if is_simulated(results):
        paragraphs.append(
            "These figures come from attnload's simulator (an attention-aware roofline model), not from real GPUs."
        )
    return paragraphs
