"""Scrape a source's pages during a run and keep per-stage windows per model: one loop for every source.

The Locust master runs ``ScrapePoller.run`` in a greenlet: urllib's sockets and
``threading.Event`` are cooperative once Locust has monkey-patched, so the poller needs
no gevent import and runs in a plain thread in tests. Each distinct URL is fetched once
per interval however many models share it (the simulator serves two models on one
port). Scraped metrics are an explanation, never a verdict: a URL that answers 404,
refuses the first connection or serves something its source cannot read turns its
models' view off with one warning line, and the run goes on. What a page is and how it
is read is the ``Source``'s (``scrape/server.py``, ``scrape/gpu.py``).
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Sequence
from typing import Generic

from attnload.scrape.parse import ServerMetricsError
from attnload.scrape.source import ExpositionT, SampleT, Source, StageWindow, SummaryT, TargetT

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 2.0
DEFAULT_TIMEOUT_S = 2.0
MAX_BODY_BYTES = 8 * 1024 * 1024
"""vLLM with many engines serves a few hundred KiB; anything past this is not a metrics page."""
_LOOPBACK = ("127.", "localhost", "::1", "[::1]")

Fetch = Callable[[str], str]


def default_metrics_url(base_url: str) -> str:
    """``<scheme>://<host:port>/metrics`` of a model's ``base_url``: vLLM and SGLang serve
    ``/metrics`` at the root of the port that serves ``/v1``, whatever path the base has."""
    parts = urllib.parse.urlsplit(base_url.strip())
    if not parts.scheme or not parts.netloc:
        raise ValueError(f"base_url {base_url!r} has no scheme://host")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


def fetch_text(url: str, timeout_s: float = DEFAULT_TIMEOUT_S, max_bytes: int = MAX_BODY_BYTES) -> str:
    """GET ``url`` with a bounded time and size; failures become ``ServerMetricsError``.

    Loopback skips proxies, as the load client does; other hosts honour HTTP(S)_PROXY/NO_PROXY.
    """
    host = urllib.parse.urlsplit(url).hostname or ""
    handlers = [urllib.request.ProxyHandler({})] if host.startswith(_LOOPBACK) else []
    opener = urllib.request.build_opener(*handlers)
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
    try:
        with opener.open(request, timeout=timeout_s) as response:
            body = response.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        raise ServerMetricsError("http", f"{url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:  # refused, reset, DNS,
        reason = getattr(exc, "reason", exc)  # timeout, a body cut short (IncompleteRead), a bad URL
        raise ServerMetricsError("connection", f"{url}: {reason or type(exc).__name__}") from None
    if len(body) > max_bytes:
        raise ServerMetricsError("too_large", f"{url} sent more than {max_bytes} bytes")
    return body.decode("utf-8", errors="replace")


class ScrapePoller(Generic[TargetT, ExpositionT, SampleT, SummaryT]):
    """Polls the targets' URLs and keeps one window per target key for one ``source``;
    ``on_sample`` sees each model's every sample (the master's ``attnload_gpu_*`` series)."""

    def __init__(
        self,
        source: Source[TargetT, ExpositionT, SampleT, SummaryT],
        targets: Sequence[TargetT],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_sample: Callable[[str, SampleT], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.source = source
        self.targets = {t.key: t for t in targets}
        self.interval_s = interval_s
        self._fetch = fetch or fetch_text
        self._clock = clock
        self._on_sample = on_sample
        self._windows = {t.key: source.window() for t in targets}
        self._totals = {t.key: source.window() for t in targets}
        """Whole-run windows, fed the same samples and never closed: the model-level summary."""
        self._off: dict[str, str] = {}
        """Target key -> why its view is off (the warning's text)."""
        self._misses: dict[str, int] = {}
        self._answered: set[str] = set()
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()
        """One poll at a time: two interleaved polls could add an older sample after a newer
        one, which the window would read as a counter reset (gevent switches on socket I/O)."""
        self._stop = threading.Event()

    # ------------------------------------------------------------------ polling

    def urls(self) -> list[str]:
        """Distinct URLs still polled (a URL is fetched once for all its models)."""
        return list(dict.fromkeys(t.url for k, t in self.targets.items() if k not in self._off))

    def poll_once(self) -> None:
        """Fetch every live URL once and fold each model's sample into its window."""
        with self._poll_lock:
            for url in self.urls():
                try:
                    exposition = self.source.parse(self._fetch(url))
                except ServerMetricsError as exc:
                    self._failed(url, exc)
                    continue
                self._answered.add(url)
                self._record(url, exposition)

    def run(self) -> None:
        """Poll until ``stop()``, on absolute deadlines so a slow scrape does not drift the grid."""
        next_at = self._clock()
        while not self._stop.is_set():
            self.poll_once()
            next_at += self.interval_s
            now = self._clock()
            if next_at < now:  # fell behind (a scrape took longer than the interval): skip, don't burst
                next_at = now + self.interval_s
            self._stop.wait(next_at - now)

    def stop(self) -> None:
        self._stop.set()

    def _failed(self, url: str, exc: ServerMetricsError) -> None:
        if url in self._answered and exc.reason in ("connection", "http"):
            log.debug("%s: %s (skipped this sample)", self.source.what, exc)  # a restart or a blip mid-run
            return
        keys = [k for k, t in self.targets.items() if t.url == url and k not in self._off]
        self._turn_off(keys, f"{url}: {self.source.explain(exc)}")

    def _record(self, url: str, exposition: ExpositionT) -> None:
        at_s = self._clock()
        with self._lock:
            for key, target in self.targets.items():
                if target.url != url or key in self._off:
                    continue
                sample = self.source.pick(exposition, target, at_s)
                if sample is not None:
                    self._windows[key].add(sample)
                    self._totals[key].add(sample)
                    if self._on_sample is not None:
                        self._on_sample(key, sample)
                elif self._windows[key].last is None and self._missed(key) >= self.source.misses_before_off:
                    self._turn_off([key], self.source.unmatched(exposition, target, url))

    def _missed(self, key: str) -> int:
        self._misses[key] = self._misses.get(key, 0) + 1
        return self._misses[key]

    def _turn_off(self, keys: Collection[str], why: str) -> None:
        for key in keys:
            self._off[key] = why
        quiet = [k for k in keys if self.source.quiet(self.targets[k])]
        loud = [k for k in keys if k not in quiet]
        if quiet:
            log.debug("%s off for %s: %s", self.source.what, ", ".join(quiet), why)
        if loud:
            log.warning("%s off for %s: %s", self.source.what, ", ".join(loud), why)

    # ------------------------------------------------------------------ results

    def off(self) -> dict[str, str]:
        """Target key -> why its view is off."""
        return dict(self._off)

    def close_stage(self, poll: bool = True) -> dict[str, SummaryT | None]:
        """Each target's summary of the stage that just ended (None: not read), and new windows
        from here. ``poll`` scrapes once first, so counter deltas end at the boundary."""
        if poll:
            self.poll_once()
        with self._lock:
            return {key: None if self._unread(key, w) else w.close() for key, w in self._windows.items()}

    def total(self) -> dict[str, SummaryT | None]:
        """Each target's summary over every sample since the first (counters: the sum of the stages')."""
        with self._lock:
            return {key: None if self._unread(key, w) else w.summary() for key, w in self._totals.items()}

    def peek(self) -> dict[str, SummaryT | None]:
        """The running stage's summaries so far, for live views; changes nothing."""
        with self._lock:
            return {key: None if self._unread(key, w) else w.summary() for key, w in self._windows.items()}

    def _unread(self, key: str, window: StageWindow[SampleT, SummaryT]) -> bool:
        return key in self._off or window.last is None
