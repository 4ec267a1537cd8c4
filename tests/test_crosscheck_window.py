"""The vLLM cross-check's common throughput window (``bench/vllm_crosscheck.py``), without vLLM.

Both tools' output tokens/s come from their per-request records through one function: from the first
answer's end to the last start, where a closed loop is full. Truth: N users each finishing a request of
T tokens every second give N × T tokens/s, whatever their phase, ramp-up or drain.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("attnload_bench_crosscheck", ROOT / "bench" / "vllm_crosscheck.py")
assert _spec is not None and _spec.loader is not None
crosscheck = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = crosscheck  # its dataclasses look their module up
_spec.loader.exec_module(crosscheck)
Timed = crosscheck.Timed


def closed_loop(users: int, seconds: int, offset_s: float) -> list[object]:
    """Each user sends back to back: 1 s requests of 11 tokens, the first after 0.2 s; user u starts at u × offset."""
    return [Timed(u * offset_s + k, 0.2, 1.0, 11) for u in range(users) for k in range(seconds)]


@pytest.mark.parametrize("offset_s", [0.0, 0.25])
def test_a_full_loop_gives_users_times_tokens_per_second(offset_s: float) -> None:
    got = crosscheck.window_throughput(closed_loop(4, 20, offset_s))
    assert got["output_tokens_per_s"] == pytest.approx(44.0, rel=0.02)


def test_ramp_up_and_a_slow_drain_stay_out_of_the_window() -> None:
    requests = closed_loop(4, 20, 0.0)
    requests.append(Timed(19.0, 3.0, 30.0, 11))  # a straggler started last: after the window
    got = crosscheck.window_throughput(requests)
    assert got["output_tokens_per_s"] == pytest.approx(44.0, rel=0.02)
    whole_span = 4 * 20 * 11 / 49.0
    assert got["output_tokens_per_s"] > 2 * whole_span  # what total / wall time would have said


def test_the_ratios_are_attnload_over_vllm_bench_and_the_band_is_judged() -> None:
    ours = [{key: 1.0 for key in crosscheck.METRICS}]
    theirs = [{key: 1.05 if key == "itl_p50" else 0.8 for key in crosscheck.METRICS}]
    result = crosscheck.mode_result(ours, theirs, banded=True)
    assert set(result) >= {"attnload", "vllm_bench", "ratios", "within_band"}
    assert result["ratios"]["itl_p50"] == pytest.approx(1 / 1.05)
    assert result["ratios"]["ttft_p50"] == pytest.approx(1.25) and result["within_band"] is False
