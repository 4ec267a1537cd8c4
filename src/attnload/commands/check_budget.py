"""Bounds for ``attnload check``'s openai SDK probe: a wall-clock deadline and a cap on bytes read.

Why: the SDK's timeout bounds each gap between reads, not the request, and its SSE decoder
keeps an unfinished line in memory; against a server that never ends its answer (one
endless line, endless events, an endless body) the probe grew to gigabytes and never
returned. Here every raw body chunk is counted and timed as the SDK reads it (an httpx
response hook wraps the body stream, so proxies configured by the environment keep
working), and the probe runs in a daemon thread that the caller waits for no longer than
the deadline, so even a server that trickles its headers cannot hold ``check`` past it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx2

from attnload.client.budget import MAX_EVENT_BYTES, max_events
from attnload.errors import ErrorClass, RequestFailed

T = TypeVar("T")
JOIN_GRACE_S = 0.5
"""How long past its deadline the probe's thread may take to notice it before the caller gives up."""
BYTES_PER_EVENT = 4096
"""Body bytes allowed per event the probe may receive (real chunks are a few hundred bytes)."""


def max_probe_bytes(max_tokens: int) -> int:
    """Body bytes one probe may read: one maximal event plus a generous size for each allowed event."""
    return MAX_EVENT_BYTES + max_events(max_tokens) * BYTES_PER_EVENT


class BoundedBody(httpx2.SyncByteStream):
    """Wraps a response's byte stream: past ``deadline`` a ``timeout``, past ``max_bytes`` a ``bad_response``."""

    def __init__(self, stream: Any, deadline: float, max_bytes: int, total_s: float) -> None:
        self._stream = stream
        self._deadline = deadline
        self._max_bytes = max_bytes
        self._total_s = total_s
        self.read = 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            self.read += len(chunk)
            if self.read > self._max_bytes:
                raise RequestFailed(
                    ErrorClass.BAD_RESPONSE,
                    f"the reply exceeded {self._max_bytes} bytes without ending (openai SDK probe): a runaway stream",
                )
            if time.perf_counter() > self._deadline:
                raise RequestFailed(ErrorClass.TIMEOUT, f"stream exceeded the total timeout {self._total_s:g} s")
            yield chunk

    def close(self) -> None:
        self._stream.close()


def bounding_hook(deadline: float, max_bytes: int, total_s: float) -> Callable[[Any], None]:
    """An httpx ``response`` event hook that puts every response body behind :class:`BoundedBody`."""

    def hook(response: Any) -> None:
        response.stream = BoundedBody(response.stream, deadline, max_bytes, total_s)

    return hook


def within(deadline: float, total_s: float, probe: Callable[[], T], on_timeout: Callable[[RequestFailed], T]) -> T:
    """Run ``probe`` in a daemon thread; past ``deadline`` (plus a grace) return ``on_timeout`` instead.

    A probe left behind holds a bounded amount of memory (its body is capped) and stops at its
    next read past the deadline; being a daemon thread, it never keeps the process alive.
    """
    result: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            result.append(probe())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread below
            failure.append(exc)

    thread = threading.Thread(target=target, name="attnload-check-sdk-probe", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.perf_counter()) + JOIN_GRACE_S)
    if thread.is_alive():
        return on_timeout(
            RequestFailed(ErrorClass.TIMEOUT, f"no complete reply within the total timeout {total_s:g} s (openai SDK)")
        )
    if failure:
        raise failure[0]
    return result[0]
