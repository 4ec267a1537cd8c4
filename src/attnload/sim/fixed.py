"""Fixed-timing engine: TTFT and every inter-token gap are exact (ATTENTION_MODEL.md §4.3).

Client tests compare measured numbers against these known truths. No batching and no
capacity limit; optional jitter ×(1 + j·U[−1, 1]) is seeded by (seed, sha256(body)) so
the same request body always gets the same timings.

All streams of one engine share one loop timer: a heap of (absolute deadline, future)
and a single ``call_at`` armed at the earliest deadline, which releases every due
stream when it fires. One ``asyncio.sleep`` per token per stream cost a Python
``TimerHandle``, Python-level heap comparisons and a cancel per token; at 256 streams
that was a large share of the simulator's core (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
import time
from collections.abc import AsyncIterator

from attnload.sim.api import EngineSnapshot, GenerationRequest, GenerationState, ServedModel

# asyncio runs a timer once it is due within the clock's resolution; release the same way.
_RESOLUTION_S = time.get_clock_info("monotonic").resolution


class FixedEngine:
    """Emits the first token ``ttft_s`` after admission, then one token every ``itl_s``."""

    def __init__(self, model: ServedModel, ttft_s: float, itl_s: float, jitter: float = 0.0, seed: int = 0) -> None:
        if ttft_s < 0 or itl_s < 0 or not 0 <= jitter < 1:
            raise ValueError("ttft and itl must be ≥ 0 and jitter in [0, 1)")
        self.model = model
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.jitter = jitter
        self.seed = seed
        self._running = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()  # ties release in arrival order, never compare futures
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    async def generate(self, request: GenerationRequest, state: GenerationState) -> AsyncIterator[int]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new loop (tests): timers of the old one are gone
            self._loop, self._due, self._timer, self._timer_at = loop, [], None, math.inf
        rng = random.Random(self.seed.to_bytes(8, "little") + request.body_digest) if self.jitter else None
        itl_s = self.itl_s
        self._running += 1
        try:
            start = loop.time()
            yield 0
            deadline = start + self._scaled(self.ttft_s, rng)
            for _ in range(request.max_tokens):
                # Absolute deadlines: a late wake-up does not push every later token back.
                if deadline > loop.time():
                    await self._wait(loop, deadline)
                yield 1
                deadline += itl_s if rng is None else self._scaled(itl_s, rng)
        finally:
            self._running -= 1

    def _wait(self, loop: asyncio.AbstractEventLoop, deadline: float) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._due, (deadline, next(self._order), waiter))
        if deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = deadline
            self._timer = loop.call_at(deadline, self._release)
        return waiter

    def _release(self) -> None:
        """The shared tick: wake every stream whose deadline has come, re-arm for the next."""
        loop = self._loop
        assert loop is not None
        due = self._due
        now = loop.time() + _RESOLUTION_S
        heappop = heapq.heappop
        while due and due[0][0] <= now:
            waiter = heappop(due)[2]
            if not waiter.done():  # a cancelled stream leaves its cancelled future behind
                waiter.set_result(None)
        if due:
            self._timer_at = due[0][0]
            self._timer = loop.call_at(self._timer_at, self._release)
        else:
            self._timer_at, self._timer = math.inf, None

    def _scaled(self, value_s: float, rng: random.Random | None) -> float:
        if rng is None:
            return value_s
        return value_s * (1.0 + self.jitter * rng.uniform(-1.0, 1.0))

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(running=self._running, waiting=0, kv_usage_ratio=0.0)

    def step_seconds(self) -> list[float]:
        return []
