"""Reading a ``--requests-out`` file back for the report: find it, sample it, plot TTFT against prompt length.

The histograms in the results say how slow the run was; the per-request lines say *which*
requests were slow. The HTML report draws one scatter from them (TTFT vs prompt tokens, a
series per model, coloured by attention type), from a bounded, deterministic sample: a
seeded reservoir over the whole file, so a ten-million-line file costs one pass and
:data:`MAX_POINTS` points, and the same file always gives the same picture.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from attnload.errors import UsageError
from attnload.report.svg import PALETTE, Series, scatter_chart
from attnload.results.model import Results

MAX_POINTS = 5_000
SAMPLE_SEED = 0
RUN_SCAN_LINES = 200_000
"""The run's own HTML (written as the master stops, inside its signal grace) reads at most this many
lines; ``attnload report`` reads the whole file."""


@dataclass(frozen=True)
class Point:
    target: str
    attention: str
    prompt_tokens: int
    ttft_s: float


def find_requests_file(
    results: Results, results_path: str | Path | None = None, explicit: str | Path | None = None
) -> Path | None:
    """The JSONL of a run: ``explicit`` (``--requests``), else the path the results recorded, else a file
    of that name beside the results (``attnload cluster results`` fetches it there). None: no file."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise UsageError(f"--requests {explicit}: no such file; pass the JSONL that --requests-out wrote")
        return path
    recorded = results.requests_out
    if recorded is None:
        return None
    candidates = [Path(recorded.path)]
    if results_path is not None:
        candidates.append(Path(results_path).parent / Path(recorded.path).name)
    return next((p for p in candidates if p.is_file()), None)


def _open(path: Path) -> IO[str]:
    return gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else path.open(encoding="utf-8")


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """Every whole record of the file; a torn last line (a killed writer) or a foreign line is skipped."""
    with _open(path) as handle:
        try:
            for text in handle:
                try:
                    record = json.loads(text)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    yield record
        except (EOFError, OSError):  # a gzip member cut short: everything before it was read
            return


def sample_points(path: Path, limit: int = MAX_POINTS, max_lines: int | None = None) -> list[Point]:
    """Up to ``limit`` successful requests with a TTFT, a seeded reservoir sample (Algorithm R) of the
    file's first ``max_lines`` lines (None: all of them)."""
    rng = random.Random(SAMPLE_SEED)
    kept: list[Point] = []
    seen = 0
    for index, record in enumerate(read_lines(path)):
        if max_lines is not None and index >= max_lines:
            break
        ttft, prompt = record.get("ttft_s"), record.get("prompt_tokens")
        if record.get("status") != "ok" or not isinstance(ttft, int | float) or not isinstance(prompt, int):
            continue
        point = Point(str(record.get("target")), str(record.get("attention") or ""), prompt, float(ttft))
        seen += 1
        if len(kept) < limit:
            kept.append(point)
        else:
            slot = rng.randrange(seen)
            if slot < limit:
                kept[slot] = point
    return kept


def ttft_scatter(points: list[Point]) -> str:
    """TTFT (s) against prompt tokens: a series per model, its colour its attention type's."""
    attentions = sorted({p.attention for p in points})
    colors = {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(attentions)}
    series: dict[str, list[Point]] = {}
    for point in points:
        series.setdefault(point.target, []).append(point)
    drawn = [
        Series(
            f"{target} ({group[0].attention})", [(p.prompt_tokens, p.ttft_s) for p in group], colors[group[0].attention]
        )
        for target, group in sorted(series.items())
    ]
    return scatter_chart("plot-ttft-scatter", drawn, "prompt tokens", "TTFT (s)")


def scatter_figure(path: Path | None, max_lines: int | None = None) -> tuple[str, str, str] | None:
    """(title, caption, svg) for the report, or None when there is no file or no point to draw."""
    if path is None:
        return None
    points = sample_points(path, max_lines=max_lines)
    if not points:
        return None
    return (
        "TTFT vs prompt length (every request)",
        f"One dot per request from {path.name} ({len(points):,} drawn, a fixed sample when there are more "
        f"than {MAX_POINTS:,}); colour: attention type. Slow requests that are also long ones point at "
        "prefill; slow short ones at queueing.",
        ttft_scatter(points),
    )
