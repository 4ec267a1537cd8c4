"""The console's "decode fit" table (a line per stage with one) and "KV capacity" table (per probed model)."""

from __future__ import annotations

from rich import box
from rich.table import Table

from attnload.report.fmt import DASH
from attnload.results.model import Results


def _num(value: float | int | None, spec: str = ",.3f") -> str:
    return DASH if value is None else format(value, spec)


def _kib(value: float | None) -> str:
    return DASH if value is None else f"{value / 1024:,.1f}"


def decode_fit_table(results: Results) -> Table | None:
    """Slope, intercept and r² of every stage's fit, with the model's KV read beside its largest batch."""
    if not any(
        s.decode_fit is not None and s.decode_fit.slope_ms_per_1k is not None for m in results.models for s in m.stages
    ):
        return None
    table = Table(
        title="decode fit (ITL against context)", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD
    )
    heads = (
        "model",
        "stage",
        "ms per 1K\ncontext",
        "ITL ms\nat 0",
        "r²",
        "samples",
        "positions",
        "KiB read / token\nmeasured / math",
        "bound",
    )
    for title in heads:
        table.add_column(title, justify="left" if title in ("model", "bound") else "right", no_wrap=True)
    for model in results.models:
        read = model.kv_read
        first = True
        for stage in model.stages:
            fit = stage.decode_fit
            if fit is None or fit.slope_ms_per_1k is None:
                continue
            kv = bound = ""
            if read is not None and read.stage == stage.index:
                kv = f"{_kib(read.measured_bytes_per_token_per_gpu)} / {_kib(read.predicted_bytes_per_token_per_gpu)}"
                bound = read.bound or DASH
            table.add_row(
                model.key if first else "",
                f"{stage.users} users" if stage.users is not None else f"#{stage.index}",
                _num(fit.slope_ms_per_1k),
                _num(fit.intercept_ms, ",.2f"),
                _num(fit.r2, ".2f"),
                f"{fit.samples:,}",
                f"{fit.positions[0]:,}–{fit.positions[1]:,}" if len(fit.positions) == 2 else DASH,
                kv,
                bound,
            )
            first = False
        table.add_section()
    return table


def kv_capacity_table(results: Results) -> Table | None:
    """A capacity probe's answer per model: sequences served at once and KV tokens, against the KV math."""
    probed = [m for m in results.models if m.kv_capacity is not None]
    if not probed:
        return None
    table = Table(title="KV capacity", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    heads = ("model", "context", "max running", "KV tokens", "per GPU", "KV math", "ratio", "knee")
    for title in heads:
        table.add_column(title, justify="left" if title in ("model", "knee") else "right", no_wrap=True)
    for model in probed:
        cap = model.kv_capacity
        assert cap is not None
        table.add_row(
            model.key,
            f"{cap.context:,}",
            _num(cap.max_running, ","),
            _num(cap.kv_tokens, ","),
            _num(cap.per_gpu, ",.0f"),
            _num(cap.predicted_tokens, ","),
            _num(cap.ratio, ".2f"),
            cap.knee or DASH,
        )
    return table
