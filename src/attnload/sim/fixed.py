"""Fixed-timing engine: TTFT and every inter-token gap are exact (ATTENTION_MODEL.md §4.3).

Client tests compare measured numbers against these known truths. No batching and no
capacity limit; optional jitter ×(1 + j·U[−1, 1]) is seeded by (seed, sha256(body)) so
the same request body always gets the same timings.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

from attnload.sim.api import EngineSnapshot, GenerationRequest, GenerationState, ServedModel


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

    async def generate(self, request: GenerationRequest, state: GenerationState) -> AsyncIterator[int]:
        loop = asyncio.get_running_loop()
        rng = random.Random(self.seed.to_bytes(8, "little") + request.body_digest) if self.jitter else None
        self._running += 1
        try:
            start = loop.time()
            yield 0
            deadline = start + self._scaled(self.ttft_s, rng)
            for _ in range(request.max_tokens):
                # Absolute deadlines: a late wake-up does not push every later token back.
                delay = deadline - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                yield 1
                deadline += self._scaled(self.itl_s, rng)
        finally:
            self._running -= 1

    def _scaled(self, value_s: float, rng: random.Random | None) -> float:
        if rng is None:
            return value_s
        return value_s * (1.0 + self.jitter * rng.uniform(-1.0, 1.0))

    def snapshot(self) -> EngineSnapshot:
        return EngineSnapshot(running=self._running, waiting=0, kv_usage_ratio=0.0)

    def step_seconds(self) -> list[float]:
        return []
