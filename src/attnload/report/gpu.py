"""The GPUs' view per stage, for every output: console, HTML, LLM tab, explanation.

A stage row says what the model's GPUs did while the client measured it: DRAM and
tensor-pipe activity (dcgm-exporter's profiling fields, or the simulator's roofline),
power, joules per output token and the ``bound`` verdict (docs/gpu-metrics.md). One
column table drives every renderer, as the server view's does.
"""

from __future__ import annotations

from rich.table import Table

from attnload.attention import KINDS
from attnload.report.fmt import DASH, RowFlag, ViewColumn, ViewTable, percent, series_name, stage_label
from attnload.results.model import GaugeSummary, GpuSummary, Results, Totals


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.0%}"


def _num(value: float | None, digits: int = 0) -> str:
    return DASH if value is None else f"{value:,.{digits}f}"


def _joules(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{value:.3g}"


def _mean(gauge: GaugeSummary | None) -> float | None:
    return gauge.mean if gauge is not None else None


Column = ViewColumn[GpuSummary]


COLUMNS: tuple[Column, ...] = (
    Column("DRAM %", "gpu.dram_active.mean", lambda t, g: _mean(g.dram_active), _pct),
    Column("tensor %", "gpu.tensor_active.mean", lambda t, g: _mean(g.tensor_active), _pct),
    Column("SM %", "gpu.sm_active.mean", lambda t, g: _mean(g.sm_active), _pct),
    Column("W", "gpu.power_w", lambda t, g: g.power_w, _num),
    Column("J/token", "gpu.joules_per_output_token", lambda t, g: g.joules_per_output_token, _joules),
    Column("energy J", "gpu.energy_j", lambda t, g: g.energy_j, _num),
    Column("GPUs", "gpu.gpus", lambda t, g: g.gpus, _num),
)
TABLE: ViewTable[GpuSummary] = ViewTable(
    source="GPU",
    title="GPU view (dcgm-exporter / simulated DCGM fields per model and stage)",
    pick=lambda totals: totals.gpu,
    columns=COLUMNS,
    flag=RowFlag("bound", lambda row: row.view.bound or DASH, path="gpu.bound"),
)


def has_gpu(results: Results) -> bool:
    return bool(TABLE.rows(results))


def console_table(results: Results) -> Table | None:
    """The terminal's "GPU view" table (None when no GPU metrics were read)."""
    return TABLE.console(results)


def html_section(results: Results) -> str:
    """The HTML "GPU view" table, cells carrying ``data-field``/``data-value`` like the others."""
    note = (
        '<p class="note">DRAM and tensor: share of cycles the memory interface / tensor pipes were active, mean '
        "over the model's GPUs; W: summed over them; J/token: their energy over the client's output tokens. "
        "bound: bandwidth when DRAM ≥ 25 % and ≥ 2× tensor, compute the other way round, else neither "
        "(docs/gpu-metrics.md).</p>"
    )
    return TABLE.html(results, note)


def live_cells(totals: Totals) -> dict[str, str]:
    """The LLM tab's GPU cells for a stage or run, as text rounded like the console (blank: no GPU metrics)."""
    gpu = getattr(totals, "gpu", None)
    if gpu is None:
        return dict.fromkeys(LIVE_KEYS, "")
    dram, tensor = _mean(gpu.dram_active), _mean(gpu.tensor_active)
    return {
        "gpu_dram_pct": "" if dram is None else percent(dram),
        "gpu_tensor_pct": "" if tensor is None else percent(tensor),
        "gpu_power_w": "" if gpu.power_w is None else f"{gpu.power_w:,.0f}",
        "gpu_j_per_token": "" if gpu.joules_per_output_token is None else f"{gpu.joules_per_output_token:.3f}",
        "gpu_bound": gpu.bound or "",
    }


LIVE_KEYS = ("gpu_dram_pct", "gpu_tensor_pct", "gpu_power_w", "gpu_j_per_token", "gpu_bound")
LIVE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("gpu_dram_pct", "GPU DRAM"),
    ("gpu_tensor_pct", "GPU tensor"),
    ("gpu_power_w", "GPU W"),
    ("gpu_j_per_token", "J/token"),
    ("gpu_bound", "Bound"),
)


def measured_gpu(results: Results) -> list[str]:
    """Sentences citing what the GPUs did at each model's heaviest stage, e.g. "GQA's GPUs at 64 users kept
    DRAM 78 % active and tensor pipes 12 %: bandwidth-bound, as 320 KiB of KV per token predicts"."""
    parts = []
    for model in results.models:
        staged = [s for s in model.stages if s.gpu is not None and s.requests.total > 0]
        gpu = staged[-1].gpu if staged else model.gpu
        if gpu is None:
            continue
        where = f" at {stage_label(staged[-1])}" if staged else ""
        dram, tensor = _mean(gpu.dram_active), _mean(gpu.tensor_active)
        if dram is None and tensor is None:
            text = f"{series_name(model)}'s GPUs{where} drew {_num(gpu.power_w)} W (no profiling fields served)"
        else:
            text = f"{series_name(model)}'s GPUs{where} kept DRAM {_pct(dram)} active and tensor pipes {_pct(tensor)}"
            if gpu.bound in ("bandwidth", "compute"):
                text += f": {gpu.bound}-bound"
                kv = model.attention_info.get("kv_bytes_per_token")
                if gpu.bound == "bandwidth" and isinstance(kv, int | float) and kv:
                    latent = model.attention in KINDS and KINDS[model.attention].latent
                    text += (
                        f", streaming weights more than its {kv / 1024:,.0f} KiB of KV per token"
                        if latent
                        else f", as {kv / 1024:,.0f} KiB of KV per token predicts"
                    )
            elif gpu.bound == "neither":
                text += ": neither roof (overhead, communication or idle time dominates)"
        if gpu.joules_per_output_token is not None:
            text += f", {_joules(gpu.joules_per_output_token)} J per output token"
        parts.append(text)
    if not parts:
        return []
    return ["On the GPUs (" + _sources(results) + "): " + "; ".join(parts) + "."]


def _sources(results: Results) -> str:
    found = {row.view.source for row in TABLE.rows(results) if row.view.source}
    return "simulated DCGM fields" if found == {"attnload-sim"} else "dcgm-exporter"
