"""Fixed-timing engine: TTFT and every inter-token gap are exact (docs/cost-model.md §4.3).

Client tests compare measured numbers against these known truths. No batching and no
capacity limit; optional jitter ×(1 + j·U[−1, 1]) is seeded by (seed, sha256(body)) so
the same request body always gets the same timings.

All streams of one engine share one timer: a heap of (absolute deadline, future) and
one ticker task that sleeps to the earliest deadline and then releases every due
stream. One ``asyncio.sleep`` per token per stream cost a timer, Python-level heap
comparisons and a cancel per token; under load one tick now releases several streams
(docs/performance.md).

With a :class:`Speculator` (``--spec-tokens K``) every gap after the first token is one verify step
that emits 1 + the accepted drafts at once, as the roofline engine's steps do: the tokens per step
and the served counters follow the acceptance exactly, at timings the test knows.

``push`` is the same schedule without an async generator: the tick calls the consumer's
sink for each due token, so a token costs no task wake-up (the simulator's server uses
it for streaming; ``generate`` remains the ``Engine`` protocol).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
import time
from collections.abc import AsyncIterator, Callable

from attnload.sim.api import EngineSnapshot, GenerationRequest, GenerationState, ServedModel
from attnload.sim.decode.speculation import SpecCounts, Speculator

# asyncio runs a timer once it is due within the clock's resolution; release the same way.
_RESOLUTION_S = time.get_clock_info("monotonic").resolution


class Pushed:
    """One request in push mode: its next deadline, tokens left, and a future that completes
    when the sink has had every token or declined one (see :meth:`FixedEngine.push`)."""

    __slots__ = ("sink", "deadline", "left", "rng", "done", "first")

    def __init__(
        self,
        sink: Callable[[int], bool],
        deadline: float,
        left: int,
        rng: random.Random | None,
        done: asyncio.Future[None],
    ) -> None:
        self.sink = sink
        self.deadline = deadline
        self.left = left
        self.rng = rng
        self.done = done
        self.first = True  # the prefill's token comes alone; decode steps may bring several


class FixedEngine:
    """Emits the first token ``ttft_s`` after admission, then one step every ``itl_s``: one token, or
    1 + the accepted drafts when a ``speculator`` is given."""

    def __init__(
        self,
        model: ServedModel,
        ttft_s: float,
        itl_s: float,
        jitter: float = 0.0,
        seed: int = 0,
        speculator: Speculator | None = None,
    ) -> None:
        if ttft_s < 0 or itl_s < 0 or not 0 <= jitter < 1:
            raise ValueError("ttft and itl must be ≥ 0 and jitter in [0, 1)")
        self.model = model
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.jitter = jitter
        self.seed = seed
        self.speculator = speculator
        self._running = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due: list[tuple[float, int, asyncio.Future[None] | Pushed]] = []
        self._order = itertools.count()  # ties release in arrival order, never compare futures
        self._ticker: asyncio.Task[None] | None = None
        self._ticker_at = math.inf

    async def generate(self, request: GenerationRequest, state: GenerationState) -> AsyncIterator[int]:
        loop = self._bind()
        rng = random.Random(self.seed.to_bytes(8, "little") + request.body_digest) if self.jitter else None
        itl_s = self.itl_s
        self._running += 1
        try:
            start = loop.time()
            yield 0
            deadline = start + self._scaled(self.ttft_s, rng)
            left, first = request.max_tokens, True
            while left > 0:
                # Absolute deadlines: a late wake-up does not push every later token back.
                if deadline > loop.time():
                    await self._wait(loop, deadline)
                n = 1 if first else self._step_tokens(left)
                yield n
                left -= n
                first = False
                deadline += itl_s if rng is None else self._scaled(itl_s, rng)
        finally:
            self._running -= 1

    def push(
        self, request: GenerationRequest, state: GenerationState, sink: Callable[[int], bool], admitted_at: float
    ) -> Pushed:
        """``generate`` without the generator, for a request admitted at ``admitted_at`` (loop time).

        ``sink(n)`` is called from the engine's tick with each step's tokens at its deadline (absolute,
        as in ``generate``); it returns False to stop (the client is gone, or must be waited
        for: ``resume`` continues from the same deadlines). ``done`` completes after the last
        token or a False; cancelling it drops the request.
        """
        loop = self._bind()
        rng = random.Random(self.seed.to_bytes(8, "little") + request.body_digest) if self.jitter else None
        item = Pushed(sink, admitted_at + self._scaled(self.ttft_s, rng), request.max_tokens, rng, loop.create_future())
        self._running += 1
        item.done.add_done_callback(self._finished)
        if item.left > 0:
            self._schedule(loop, item.deadline, item)
        else:
            item.done.set_result(None)
        return item

    def resume(self, item: Pushed) -> None:
        """Continue a request whose sink returned False, from its next deadline."""
        loop = self._bind()
        self._running += 1
        item.done = loop.create_future()
        item.done.add_done_callback(self._finished)
        self._schedule(loop, item.deadline, item)

    def _finished(self, _: asyncio.Future[None]) -> None:
        self._running -= 1

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new loop (tests): timers of the old one are gone
            self._loop, self._due, self._ticker, self._ticker_at = loop, [], None, math.inf
        return loop

    def _fire(self, item: Pushed, heappush: Callable[..., None]) -> None:
        """One step of a pushed request (called by the tick at its deadline): a token, or 1 + accepted drafts."""
        done = item.done
        if done.done():  # cancelled: its handler went away
            return
        n = 1 if item.first or self.speculator is None else self._step_tokens(item.left)  # no call when not speculating
        item.first = False
        try:
            more = item.sink(n)
        except Exception as exc:  # the consumer's bug: fail its request, keep the tick alive for the rest
            done.set_exception(exc)
            return
        item.left -= n
        rng = item.rng
        item.deadline += self.itl_s if rng is None else self._scaled(self.itl_s, rng)
        if item.left <= 0 or not more:
            done.set_result(None)
        else:
            heappush(self._due, (item.deadline, next(self._order), item))

    def _step_tokens(self, left: int) -> int:
        """Tokens one decode step emits: 1, or 1 + the accepted drafts, never past the request's budget."""
        speculator = self.speculator
        return 1 if speculator is None else min(1 + speculator.accept(), left)

    def _wait(self, loop: asyncio.AbstractEventLoop, deadline: float) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = loop.create_future()
        self._schedule(loop, deadline, waiter)
        return waiter

    def _schedule(self, loop: asyncio.AbstractEventLoop, deadline: float, entry: asyncio.Future[None] | Pushed) -> None:
        heapq.heappush(self._due, (deadline, next(self._order), entry))
        if deadline < self._ticker_at:  # idle, or due before the ticker wakes: (re)start it
            if self._ticker is not None:
                self._ticker.cancel()
            self._ticker_at = deadline
            self._ticker = loop.create_task(self._tick(loop), name=f"attnload-sim-fixed-{self.model.id}")

    async def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        """Sleep to the earliest deadline, wake every stream that is due, repeat until none wait."""
        due = self._due
        heappop, heappush, fire = heapq.heappop, heapq.heappush, self._fire
        me = asyncio.current_task()
        try:
            while due:
                head = due[0][0]
                self._ticker_at = head
                delay = head - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                now = max(loop.time() + _RESOLUTION_S, head)
                while due and due[0][0] <= now:
                    entry = heappop(due)[2]
                    if isinstance(entry, Pushed):
                        fire(entry, heappush)
                    elif not entry.done():  # a cancelled stream leaves its cancelled future behind
                        entry.set_result(None)
        finally:
            if self._ticker is me:
                self._ticker, self._ticker_at = None, math.inf

    def _scaled(self, value_s: float, rng: random.Random | None) -> float:
        if rng is None:
            return value_s
        return value_s * (1.0 + self.jitter * rng.uniform(-1.0, 1.0))

    @property
    def spec_counts(self) -> SpecCounts | None:
        """Speculative decoding's counters since start (vLLM's); None when the model does not speculate."""
        return self.speculator.counts if self.speculator is not None else None

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(running=self._running, waiting=0, kv_usage_ratio=0.0)

    def step_seconds(self) -> list[float]:
        return []

    def scheduled_itl(self) -> None:
        return None
