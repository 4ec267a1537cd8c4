"""Types of the C extension ``attnload.native._fastpath`` (native/*.c; native/fastpath.h maps each file)."""

from collections.abc import Sequence
from typing import Any

from typing_extensions import disjoint_base

PUMP_DONE: int
PUMP_DONE_OPEN: int
PUMP_COMPLETE: int
PUMP_EOF: int
PUMP_TIMEOUT: int
PUMP_ABANDON: int

class FramingError(ValueError):
    """A chunked body llhttp would reject (the caller's bad_response)."""

@disjoint_base
class Splitter:
    """``attnload.client.sse.SseSplitter`` in C (sse.c); a subclass supplies ``_overflow`` and ``_dataless``."""

    events: list[tuple[bytes, bytes]]
    dropped: int
    max_event_bytes: int
    max_dataless: int
    def __init__(self, max_event_bytes: int = ..., max_dataless: int = ...) -> None: ...
    def feed(self, data: bytes | bytearray | memoryview) -> None: ...
    def discard(self) -> None: ...
    @property
    def pending(self) -> bytes: ...

@disjoint_base
class StreamBase:
    """The state of one response being read (stream.c) and its read loop (readloop.c)."""

    sse: Splitter
    first_at: float | None
    last_at: float
    gaps: list[float]
    chunk_tokens: list[int]
    texts: list[str] | None
    plain_head: bytes | None
    plain_tail: bytes
    done: bool
    events_left: int
    @property
    def framed(self) -> bool: ...
    @property
    def body_complete(self) -> bool: ...
    @property
    def trailing(self) -> bool: ...
    def consume(self, at: float, origin: float) -> None: ...
    def _stamp(self, at: float, tokens: int, text: str | None) -> None: ...
    def start_body(self, data: bytes) -> None: ...
    def feed_body(self, data: bytes) -> None: ...
    def pump(
        self,
        reader: Any,
        at: float,
        deadline: float,
        first_deadline: float,
        idle_s: float,
        abandon_chunks: float,
        abandon_at: float,
        tail_s: float,
    ) -> int: ...

def gap_pairs(gaps: list[float], tokens: list[int], /) -> tuple[tuple[float, int], ...]: ...
def record_pairs(
    buckets: dict[int, int],
    samples: Sequence[tuple[float, int]],
    count: int,
    total: float,
    low: float,
    high: float,
    min_value: float,
    log_gamma: float,
    /,
) -> tuple[int, float, float, float] | None: ...
def fit_pairs(
    samples: tuple[tuple[float, int], ...],
    prompt_tokens: int,
    completion_tokens: int,
    bins: dict[int, int],
    window_tokens: int,
    min_value: float,
    log_gamma: float,
    /,
) -> tuple[int, float, float, float, float, float, float, float] | None: ...
