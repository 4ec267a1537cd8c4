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


def test_a_spread_start_opens_the_window_once_every_user_is_in() -> None:
    """A pilot alone for 3 s, then three more users: only the full loop counts (``full`` = the users)."""
    requests = [Timed(float(k), 0.2, 1.0, 11) for k in range(20)]
    requests += [Timed(3.0 + u * 0.3 + k, 0.2, 1.0, 11) for u in range(3) for k in range(17)]
    assert crosscheck.window_throughput(requests, full=4)["output_tokens_per_s"] == pytest.approx(44.0, rel=0.03)
    assert crosscheck.window_throughput(requests)["output_tokens_per_s"] < 40.0  # the ramp would weigh in


def test_the_ratios_are_attnload_over_vllm_bench_on_each_tools_best_round() -> None:
    ours = [{key: 1.0 for key in crosscheck.METRICS}, {key: 2.0 for key in crosscheck.METRICS}]
    theirs = [{key: 1.05 if key == "itl_p50" else 0.8 for key in crosscheck.METRICS}]
    result = crosscheck.mode_result(ours, theirs, banded=True)
    assert set(result) >= {"attnload", "vllm_bench", "ratios", "within_band", "median", "each_round"}
    assert result["attnload"]["ttft_p50"] == 1.0 and result["attnload"]["output_tokens_per_s"] == 2.0
    assert result["ratios"]["itl_p50"] == pytest.approx(1 / 1.05)
    assert result["ratios"]["ttft_p50"] == pytest.approx(1.25) and result["within_band"] is False
    assert result["ratios_of_medians"]["ttft_p50"] == pytest.approx(1.5 / 0.8)


def test_the_modes_run_in_order_and_write_every_mode(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The orchestration without vLLM: each tool's runs stubbed, the rate derived from the burst rounds."""
    calls: list[tuple[str, object]] = []
    rows = {key: 10.0 for key in crosscheck.METRICS}

    def bench(env: object, spec: object, out: Path, lengths: object, **kw: object) -> dict[str, object]:
        calls.append(("vllm_bench", kw.get("rate")))
        return {**rows, "duration_s": 5.0, "request_throughput": 8.0, "send_offsets_s": [0.0, 0.3, 1.1]}

    def ours(
        spec: object, out: Path, lengths: object, *, duration_s: float, load: list[str], stage_s: float | None = None
    ) -> dict[str, object]:
        calls.append(("attnload", " ".join(load)))
        return dict(rows)

    monkeypatch.setattr(crosscheck, "vllm_bench", bench)
    monkeypatch.setattr(crosscheck, "attnload_run", ours)
    modes = crosscheck.run_modes(tmp_path, object(), tmp_path, crosscheck.Lengths(64, 32, 4), 40, 2)
    assert list(modes) == ["burst", "poisson", "default"]
    assert modes["burst"]["within_band"] and modes["poisson"]["within_band"]
    assert modes["poisson"]["rate_rps"] == 4.0 and ("vllm_bench", 4.0) in calls
    assert ("attnload", "--users 4 --start-spread off") in calls
    replays = [c for c in calls if c[0] == "attnload" and "--shape replay:" in str(c[1])]
    assert len(replays) == 2 and str(replays[0][1]).endswith("poisson-0/schedule.jsonl")
    poisson_calls = calls[calls.index(("vllm_bench", 4.0)) :]
    assert [c[0] for c in poisson_calls[:4]] == ["vllm_bench", "attnload"] * 2  # each schedule made, then replayed
    assert "shared schedule" in modes["poisson"]["arrivals"]
    assert calls.count(("attnload", "--users 4")) == 2 and "reason" in modes["default"]
    assert any("OUTSIDE" not in line and "burst" in line for line in crosscheck.table(modes))


def test_the_poisson_mode_replays_vllm_benchs_send_times_as_attnload_reads_them(tmp_path: Path) -> None:
    """One shared schedule: the offsets vllm bench recorded come back as attnload's trace, same lengths."""
    from attnload.measure.tokens import MESSAGE_OVERHEAD_TOKENS
    from attnload.workload.trace import load_trace

    offsets = [0.0, 0.137, 0.52, 0.521, 2.25]
    lengths = crosscheck.Lengths(64, 32, 4)
    trace = load_trace(crosscheck.write_schedule(offsets, lengths, tmp_path / "schedule.jsonl"))
    assert [r.offset_s for r in trace.requests] == pytest.approx(offsets, abs=1e-6)
    assert {(r.input_tokens, r.output_tokens) for r in trace.requests} == {(64 + MESSAGE_OVERHEAD_TOKENS, 32)}
    assert "vllm bench" in crosscheck.ARRIVALS and "replay" in crosscheck.ARRIVALS
