"""Client saturation: sustained CPU over 90 %, or the several-chunks-per-read ITL shape (docs/design.md)."""

from __future__ import annotations

import pytest

from attnload.measure.recorder import Recorder, RequestRecord
from attnload.results.summarize import client_info
from attnload.runner.sender import cpumeter
from attnload.runner.sender.cpumeter import CpuMeter


class FakeProcess:
    """Wall and CPU clocks a test advances one second at a time."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wall = self.cpu = 0.0
        monkeypatch.setattr(cpumeter.time, "perf_counter", lambda: self.wall)
        monkeypatch.setattr(cpumeter, "_cpu_seconds", lambda: self.cpu)

    def second(self, busy: float) -> None:
        self.wall += 1.0
        self.cpu += busy


def samples(monkeypatch: pytest.MonkeyPatch, busy: list[float]) -> tuple[list[float], float]:
    process = FakeProcess(monkeypatch)
    meter = CpuMeter()
    out = []
    for ratio in busy:
        process.second(ratio)
        out.append(meter.sample())
    return out, meter.peak()


def test_one_busy_second_is_not_saturation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Process start or a spawn burst: one full second, then normal load."""
    _, peak = samples(monkeypatch, [1.0, 0.3, 0.5, 0.98, 0.4, 0.5])
    assert peak == pytest.approx(0.5)
    assert not client_info(1, 0, peak, Recorder()).client_saturated


def test_two_busy_seconds_are(monkeypatch: pytest.MonkeyPatch) -> None:
    sustained, peak = samples(monkeypatch, [0.4, 0.95, 0.97, 0.5])
    assert sustained == pytest.approx([0.0, 0.4, 0.95, 0.5])
    info = client_info(1, 0, peak, Recorder())
    assert info.client_saturated and info.saturation_reasons == ["worker CPU reached 95% (> 90%)"]


def test_peak_resets_after_each_report(monkeypatch: pytest.MonkeyPatch) -> None:
    process = FakeProcess(monkeypatch)
    meter = CpuMeter()
    for busy in (0.95, 0.95, 0.2, 0.2):
        process.second(busy)
        meter.sample()
    assert meter.peak() == pytest.approx(0.95)
    assert meter.peak() == 0.0


def _record(gaps: tuple[float, ...]) -> RequestRecord:
    return RequestRecord(
        model_key="m",
        profile="p",
        stage=0,
        outcome="ok",
        error=None,
        ttft_s=0.05,
        itl_samples=tuple((g, 1) for g in gaps),
        e2e_s=1.0,
        prompt_tokens=10,
        completion_tokens=len(gaps) + 1,
        cached_prompt_tokens=0,
        tokens_estimated=False,
    )


def test_itl_collapse_flags_a_client_that_reads_chunks_in_bursts() -> None:
    """Behind, a client finds 5 chunks per read: 4 gaps of ~0 and one of the whole 50 ms."""
    recorder = Recorder()
    for _ in range(100):
        recorder.add(_record((0.0001,) * 4 * 5 + (0.05,) * 5))
    info = client_info(1, 0, 0.5, recorder)
    assert info.client_saturated and "ITL p50 collapsed" in info.saturation_reasons[0]


def test_steady_itl_is_not_saturation() -> None:
    recorder = Recorder()
    for _ in range(100):
        recorder.add(_record((0.010, 0.011, 0.009) * 10))
    assert not client_info(1, 0, 0.5, recorder).client_saturated
