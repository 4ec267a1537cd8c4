"""docs/cost-model.md §7.13 on the virtual clock: the reference table and every stated ratio.

The HTTP run (``tests/e2e/test_acceptance_7_13.py``) checks the same scenario through the real
server and load generator. This one reproduces how §7.13's reference was computed: closed-loop
users spawned on an exact 0.1 s grid per model, each sending its next request the instant the
last one ends, so the numbers are deterministic and the TTFT ratios can be asserted exactly.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import statistics

import pytest

from attnload.sim.costmodel import EngineConfig, deploy
from attnload.sim.presets import PRESETS
from attnload.sim.scheduler import Scheduler, SimSequence

STAGES = ((32, 75.0), (72, 75.0))  # users per model, seconds
SPAWN_S = 0.1
PROMPT, MAX_TOKENS = 2000, 256


@dataclasses.dataclass
class Stage:
    ttft: list[float] = dataclasses.field(default_factory=list)
    itl: list[float] = dataclasses.field(default_factory=list)
    tokens: int = 0

    def q(self, values: list[float], p: float) -> float:
        return sorted(values)[min(int(p * len(values)), len(values) - 1)]


def run(model: str, resubmit_s: float = 0.0) -> tuple[list[Stage], int]:
    """The two stages for one model; returns per-stage samples and the preemption count."""
    dep = deploy(PRESETS[model], dataclasses.replace(EngineConfig(), kv_capacity_scale=0.05))
    stages = [Stage() for _ in STAGES]
    ends = list(itertools.accumulate(duration for _, duration in STAGES))
    arrivals: list[float] = []
    started = 0.0
    for (users, duration), previous in zip(STAGES, (0, *[u for u, _ in STAGES]), strict=False):
        arrivals += [started + i * SPAWN_S for i in range(users - previous)]
        started += duration
    heapq.heapify(arrivals)
    last: dict[SimSequence, float] = {}
    ids = itertools.count()
    now = 0.0

    def on_tokens(seq: SimSequence, n: int) -> None:
        current = next(
            (s for s, end in zip(stages, ends, strict=True) if now < end), stages[-1]
        )  # last step may overrun
        current.tokens += n
        if seq in last:
            current.itl.append(now - last[seq])
        else:
            current.ttft.append(now - seq.arrival_s)
        last[seq] = now

    def on_finish(seq: SimSequence) -> None:
        del last[seq]
        heapq.heappush(arrivals, now + resubmit_s)

    sched = Scheduler(dep, on_tokens, on_finish)
    while now < ends[-1]:
        while arrivals and arrivals[0] <= now:
            sched.submit(SimSequence(f"r{next(ids)}", PROMPT, MAX_TOKENS), heapq.heappop(arrivals))
        step = sched.plan(now) if sched.has_work() else None
        if step is None:
            now = arrivals[0]
            continue
        now += step
        sched.complete(now)
    return stages, sched.preemptions_total


@pytest.fixture(scope="module")
def pair() -> dict[str, tuple[list[Stage], int]]:
    return {"gqa": run("llama-3-70b"), "mla": run("deepseek-v3")}


@pytest.mark.parametrize(
    ("model", "index", "ttft_p50", "ttft_p99", "itl_p50_ms", "tok_s"),
    [
        # The calibrated model (docs/cost-model.md §7.13 and §10); the level-1 model's
        # reference was GQA 0.05/0.05 s, 5.6 ms, 2800 and 0.40/0.85 s, 6.8 ms, 3400;
        # MLA 0.08/0.10 s, 19 ms, 1290 and 0.10/0.14 s, 25 ms, 2140.
        ("gqa", 0, 0.05, 0.055, 5.74, 2772),
        ("mla", 0, 0.11, 0.17, 20.8, 1086),
        ("gqa", 1, 0.40, 1.63, 7.13, 3237),
        ("mla", 1, 0.15, 0.30, 27.7, 1794),
    ],
)
def test_reference_table(
    pair: dict[str, tuple[list[Stage], int]],
    model: str,
    index: int,
    ttft_p50: float,
    ttft_p99: float,
    itl_p50_ms: float,
    tok_s: float,
) -> None:
    """§7.13's table: ITL and tok/s within 5 % (its stated agreement), TTFT within 0.02 s or 15 %."""
    stage = pair[model][0][index]
    assert stage.q(stage.itl, 0.5) * 1000 == pytest.approx(itl_p50_ms, rel=0.05)
    assert stage.tokens / STAGES[index][1] == pytest.approx(tok_s, rel=0.05)
    assert stage.q(stage.ttft, 0.5) == pytest.approx(ttft_p50, abs=0.02, rel=0.15)
    assert stage.q(stage.ttft, 0.99) == pytest.approx(ttft_p99, abs=0.02, rel=0.15)


def test_stated_ratios(pair: dict[str, tuple[list[Stage], int]]) -> None:
    (g1, g2), gqa_preemptions = pair["gqa"]
    (m1, m2), mla_preemptions = pair["mla"]
    for g, m in ((g1, m1), (g2, m2)):
        assert m.q(m.itl, 0.5) >= 2.5 * g.q(g.itl, 0.5)
    assert g1.tokens >= 1.5 * m1.tokens and g2.tokens >= 1.3 * m2.tokens
    assert g2.q(g2.ttft, 0.99) >= 3 * m2.q(m2.ttft, 0.99)
    assert g2.q(g2.ttft, 0.5) >= 3 * g1.q(g1.ttft, 0.5)
    assert m2.q(m2.ttft, 0.5) <= 1.5 * m1.q(m1.ttft, 0.5)
    assert gqa_preemptions > 0 and mla_preemptions == 0
    assert statistics.fmean(g1.ttft) < 0.1  # GQA does not queue at N=32


def test_gqa_stage_2_ttft_tail_comes_from_preemption_cascades() -> None:
    """GQA's stage-2 TTFT tail is set by preemption cascades. Before calibration 2 ms of client
    think time avoided them; with the calibrated step times it no longer does, so the tail (and the
    §7.13 p99 ratio) holds with a real client's think time too."""
    (_, g2), preemptions = run("llama-3-70b", resubmit_s=0.002)
    (_, m2), _ = run("deepseek-v3", resubmit_s=0.002)
    assert preemptions > 0 and g2.q(g2.ttft, 0.99) >= 3 * m2.q(m2.ttft, 0.99)
