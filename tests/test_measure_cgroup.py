"""cgroup CPU throttling read from fake ``cpu.stat`` files: v2, v1, absent, and the saturation flag."""

from __future__ import annotations

from pathlib import Path

from attnload.measure.cgroup import (
    THROTTLED_REASON,
    ThrottleMeter,
    find_cpu_stat,
    read_cpu_stat,
    throttled_reason,
)
from attnload.measure.recorder import Recorder
from attnload.results.summarize import client_info

V2 = "usage_usec 1000\nuser_usec 600\nsystem_usec 400\nnr_periods 50\nnr_throttled {n}\nthrottled_usec {t}\n"
V1 = "nr_periods 50\nnr_throttled {n}\nthrottled_time {t}\n"


def test_reads_v2_and_v1(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "v2.stat", tmp_path / "v1.stat"
    v2.write_text(V2.format(n=7, t=250_000))
    v1.write_text(V1.format(n=3, t=1_500_000_000))
    assert read_cpu_stat(v2) is not None and read_cpu_stat(v2).throttled_s == 0.25  # type: ignore[union-attr]
    assert read_cpu_stat(v2).nr_throttled == 7  # type: ignore[union-attr]
    assert read_cpu_stat(v1).throttled_s == 1.5  # type: ignore[union-attr]


def test_absent_or_foreign_file_is_none(tmp_path: Path) -> None:
    assert read_cpu_stat(tmp_path / "missing") is None
    (tmp_path / "other").write_text("usage_usec 5\n")
    assert read_cpu_stat(tmp_path / "other") is None
    assert find_cpu_stat((tmp_path / "missing", tmp_path / "other")) is None
    meter = ThrottleMeter(tmp_path / "missing")
    assert meter.sample() == 0.0 and meter.peak() == 0.0


def test_meter_ratio_of_wall_time(tmp_path: Path) -> None:
    stat = tmp_path / "cpu.stat"
    stat.write_text(V2.format(n=0, t=0))
    now = [100.0]
    meter = ThrottleMeter(stat, clock=lambda: now[0])
    now[0] = 102.0
    stat.write_text(V2.format(n=40, t=600_000))  # 0.6 s throttled in 2 s of wall time
    assert abs(meter.sample() - 0.3) < 1e-9
    now[0] = 104.0
    stat.write_text(V2.format(n=41, t=620_000))  # 0.02 s in 2 s
    assert abs(meter.sample() - 0.01) < 1e-9
    assert abs(meter.peak() - 0.3) < 1e-9 and meter.peak() == 0.0


def test_throttling_flags_client_saturated() -> None:
    assert throttled_reason(0.05) is None
    reason = throttled_reason(0.3)
    assert reason is not None and reason.startswith(THROTTLED_REASON)
    info = client_info(1, 0, 0.5, Recorder(), throttled_ratio=0.3)
    assert info.client_saturated and info.saturation_reasons[0].startswith("cpu throttled by cgroup limit")
    assert not client_info(1, 0, 0.5, Recorder(), throttled_ratio=0.02).client_saturated
