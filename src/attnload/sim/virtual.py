"""Deterministic virtual-clock runs of the scheduler: closed-loop users without asyncio.

docs/cost-model.md §7.7 asks what N closed-loop users do to TTFT when KV capacity runs
out. This driver runs the same :class:`Scheduler` the HTTP engine uses, with time taken
from the cost model only, so a 300 s study takes a second or two of CPU and gives the
same answer every time.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

from attnload.sim.costmodel import Deployment
from attnload.sim.scheduler import Scheduler, SimSequence


@dataclass(frozen=True)
class ClosedLoopResult:
    """What a closed-loop run measured (all requests that got a first token within the run)."""

    requests_started: int
    requests_completed: int
    mean_ttft_s: float
    max_ttft_s: float
    mean_itl_s: float
    output_tokens: int
    max_waiting: int
    preemptions: int
    steps: int
    duration_s: float

    @property
    def waited(self) -> bool:
        return self.max_waiting > 0

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s


def run_closed_loop(
    dep: Deployment,
    users: int,
    prompt_tokens: int,
    max_tokens: int,
    duration_s: float,
    *,
    shared_prefix_blocks: int = 0,
    hash_prompts: bool = False,
) -> ClosedLoopResult:
    """N users start at t=0; each sends its next request the moment the last one finishes.

    Prompts are unique beyond ``shared_prefix_blocks`` leading 16-token blocks. Unique blocks
    can never hit the prefix cache, so they are hashed only with ``hash_prompts`` (which
    exercises cache bookkeeping at ~2 µs per block, the same timings either way).
    """
    ids = itertools.count()
    ttfts: list[float] = []
    itls: list[float] = []
    output_tokens = 0
    completed = 0
    last_token_s: dict[SimSequence, float] = {}
    now_s = 0.0

    def submit() -> None:
        n = next(ids)
        blocks = prompt_tokens // 16
        unique_end = blocks if hash_prompts else shared_prefix_blocks
        hashes = tuple(range(shared_prefix_blocks)) + tuple(
            (n + 1) << 32 | i for i in range(shared_prefix_blocks, unique_end)
        )
        sched.submit(SimSequence(f"r{n}", prompt_tokens, max_tokens, hashes), now_s)

    def on_tokens(seq: SimSequence, count: int) -> None:
        nonlocal output_tokens
        output_tokens += count
        previous = last_token_s.get(seq)
        if previous is None:
            ttfts.append(now_s - seq.arrival_s)
        else:
            itls.append(now_s - previous)
        last_token_s[seq] = now_s

    def on_finish(seq: SimSequence) -> None:
        nonlocal completed
        completed += 1
        last_token_s.pop(seq, None)
        submit()

    sched = Scheduler(dep, on_tokens, on_finish)
    for _ in range(users):
        submit()
    steps = 0
    while now_s < duration_s:
        step_s = sched.plan(now_s)
        if step_s is None:
            break
        now_s += step_s
        sched.complete(now_s)
        steps += 1
    return ClosedLoopResult(
        requests_started=next(ids),
        requests_completed=completed,
        mean_ttft_s=statistics.fmean(ttfts) if ttfts else 0.0,
        max_ttft_s=max(ttfts, default=0.0),
        mean_itl_s=statistics.fmean(itls) if itls else 0.0,
        output_tokens=output_tokens,
        max_waiting=sched.max_waiting_seen,
        preemptions=sched.preemptions_total,
        steps=steps,
        duration_s=now_s,
    )
