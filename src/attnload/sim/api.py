"""The contract between the simulator's HTTP server and its timing engines.

The server (``sim/serving/server.py``) owns HTTP, SSE framing, filler text, usage and the
server-side truth (``/stats``); an engine owns *when* tokens appear. Two engines
implement :class:`Engine`: ``FixedEngine`` (``sim/fixed.py``: exact TTFT and ITL) and
the attention-aware roofline engine (``sim/engine.py``: docs/cost-model.md §3–§4).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from attnload.measure.histogram import LogHistogram


@dataclass(frozen=True)
class GenerationRequest:
    """What an engine needs to schedule one chat completion."""

    request_id: str
    prompt_tokens: int
    max_tokens: int
    prompt_blocks: tuple[int, ...] = ()
    """Chained 64-byte block hashes of the prompt (prefix cache, §4.5); empty disables caching."""
    body_digest: bytes = b""
    """sha256 of the request body: seeds fixed-mode jitter deterministically (§4.3)."""


@dataclass
class GenerationState:
    """Filled in by the engine while a request runs; the server reads it for usage."""

    cached_tokens: int = 0
    preemptions: int = 0


@dataclass(frozen=True)
class EngineSnapshot:
    """Instantaneous engine state for the simulator's ``/metrics`` gauges."""

    running: int
    waiting: int
    kv_usage_ratio: float
    preemptions_total: int = 0
    lag_seconds_total: float = 0.0


@dataclass(frozen=True)
class ServedModel:
    """Identity of a served model as clients see it."""

    id: str
    attention: str
    preset: str
    max_model_len: int = 131072
    details: dict[str, object] = field(default_factory=dict)
    """Extra facts for ``/v1/models`` and ``--list`` (KV bytes/token/GPU, capacity, parallelism)."""
    aliases: tuple[str, ...] = ()
    """Other names the server routes to this model (its preset key and the preset's aliases)."""


class EngineRejected(Exception):
    """The engine refuses a request before it starts: mapped to an OpenAI-shaped error."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after_s = retry_after_s


class Engine(Protocol):
    """Schedules token emission for one served model."""

    model: ServedModel

    def generate(self, request: GenerationRequest, state: GenerationState) -> AsyncIterator[int]:
        """Yield once per emission: first ``0`` when admitted (the role-only chunk), then the
        number of tokens that became available at that moment (≥ 1), in order, until exactly
        ``request.max_tokens`` tokens were yielded. Raise :class:`EngineRejected` before the
        first yield to refuse (400 context length, 429 overload). If the consumer stops
        iterating (client went away), the engine frees the request's resources."""
        ...

    def snapshot(self) -> EngineSnapshot:
        """Current running/waiting counts and KV usage."""
        ...

    def step_seconds(self) -> list[float]:
        """Durations of engine steps since the last call (drained); fixed mode returns []."""
        ...

    def scheduled_itl(self) -> LogHistogram | None:
        """Per-token ITL as the model's schedule sets it, since start: what emitted ITL should be if
        the server keeps up. None in fixed mode, whose schedule is ``fixed_itl_ms`` itself."""
        ...
