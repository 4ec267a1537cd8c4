"""Scrape each model server's ``/metrics`` during a run and keep per-stage windows per model.

The Locust master runs ``ServerMetricsPoller.run`` in a greenlet: urllib's sockets and
``threading.Event`` are cooperative once Locust has monkey-patched, so the poller needs
no gevent import and runs in a plain thread in tests. Each distinct URL is fetched once
per interval however many models share it (the simulator serves two models on one
port). Server metrics are an explanation, never a verdict: a URL that answers 404,
refuses the first connection or serves something that is not a known exposition turns
its models' server metrics off with one warning line, and the run goes on.
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
from dataclasses import dataclass
from typing import Any

from attnload.scrape.parse import Exposition, ServerMetricsError, parse_exposition
from attnload.scrape.window import ServerWindow

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


@dataclass(frozen=True)
class ScrapeTarget:
    """One model whose server metrics are wanted: results key, URL, names it may be served as."""

    key: str
    url: str
    names: frozenset[str]
    """The model's id and known aliases, matched against the server's ``model_name`` label."""


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


class ServerMetricsPoller:
    """Polls the targets' URLs and keeps one ``ServerWindow`` per target key.

    ``parse``, ``window_type`` and ``explain`` are the hooks the GPU poller
    (``scrape/gpupoller.py``) replaces: same cadence, fetch and failure rules."""

    parse: Callable[[str], Any] = staticmethod(parse_exposition)
    window_type: Callable[[], Any] = ServerWindow

    def __init__(
        self,
        targets: Sequence[ScrapeTarget],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.targets = {t.key: t for t in targets}
        self.interval_s = interval_s
        self._fetch = fetch or fetch_text
        self._clock = clock
        self._windows = {t.key: self.window_type() for t in targets}
        self._totals = {t.key: self.window_type() for t in targets}
        """Whole-run windows, fed the same samples and never closed: the model-level summary."""
        self._off: dict[str, str] = {}
        """Target key -> why its server metrics are off (the warning's text)."""
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
                    exposition = self.parse(self._fetch(url))
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
            log.debug("server metrics: %s (skipped this sample)", exc)  # a restart or a blip mid-run
            return
        keys = [k for k, t in self.targets.items() if t.url == url and k not in self._off]
        self._turn_off(keys, f"{url}: {self.explain(exc)}")

    def explain(self, exc: ServerMetricsError) -> str:
        return _explain(exc)

    def _record(self, url: str, exposition: Exposition) -> None:
        with self._lock:
            for key, target in self.targets.items():
                if target.url != url or key in self._off:
                    continue
                sample = exposition.sample_for(target.names)
                if sample is not None:
                    self._windows[key].add(sample)
                    self._totals[key].add(sample)
                elif key not in self._seen_keys():
                    served = ", ".join(sorted(exposition.samples)) or "none"
                    self._turn_off([key], f"{url} serves {served}, none is {_names(target.names)}")

    def _seen_keys(self) -> set[str]:
        return {k for k, w in self._windows.items() if w.last is not None}

    def _turn_off(self, keys: Collection[str], why: str) -> None:
        if not keys:
            return
        for key in keys:
            self._off[key] = why
        log.warning("server metrics off for %s: %s", ", ".join(keys), why)

    # ------------------------------------------------------------------ results

    def off(self) -> dict[str, str]:
        """Target key -> why its server metrics are off."""
        return dict(self._off)

    def close_stage(self, poll: bool = True) -> dict[str, dict[str, Any] | None]:
        """Each target's summary of the stage that just ended (None: no server metrics), and
        new windows from here. ``poll`` scrapes once first, so counter deltas end at the boundary."""
        if poll:
            self.poll_once()
        with self._lock:
            return {
                key: None if key in self._off or window.last is None else window.close()
                for key, window in self._windows.items()
            }

    def total(self) -> dict[str, dict[str, Any] | None]:
        """Each target's summary over every sample since the first (counters: the sum of the stages')."""
        with self._lock:
            return {
                key: None if key in self._off or window.last is None else window.summary()
                for key, window in self._totals.items()
            }

    def peek(self) -> dict[str, dict[str, Any] | None]:
        """The running stage's summaries so far, for live views; changes nothing."""
        with self._lock:
            return {
                key: None if key in self._off or window.last is None else window.summary()
                for key, window in self._windows.items()
            }


def _explain(exc: ServerMetricsError) -> str:
    hints = {
        "http": "no Prometheus /metrics there; set metrics_url or --server-metrics off",
        "connection": "nothing answered; set metrics_url to the server's metrics port",
        "not_prometheus": "the body is not Prometheus text; set metrics_url",
        "unknown_server": "Prometheus text, but no vLLM, SGLang or attnload sim metrics in it",
        "too_large": "the body is too large for a metrics page",
    }
    return f"{exc.detail} ({hints.get(exc.reason, exc.reason)})"


def _names(names: Collection[str]) -> str:
    return " or ".join(sorted(names)) or "this model"
