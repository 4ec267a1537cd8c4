"""The results built for the report tests (tests/helpers/results.py) are valid results."""

from __future__ import annotations

from pathlib import Path

from attnload.results.model import load_results
from helpers.results import pair


def test_factory_round_trips_through_json(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(pair().to_json())
    assert load_results(path) == pair()


def test_factory_percentiles_never_exceed_max() -> None:
    for m in pair().models:
        for s in m.stages:
            assert s.ttft_s.p99 is not None and s.ttft_s.max is not None and s.ttft_s.p99 <= s.ttft_s.max
