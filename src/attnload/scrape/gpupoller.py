"""Scrape dcgm-exporter (or the simulator's DCGM names) per model during a run.

The same loop as the server view's ``ServerMetricsPoller`` (absolute deadlines, one fetch
per URL per interval, bounded body and time, one warning and off on a URL that is not a
metrics page), with the DCGM parser, a ``GpuWindow`` per model and each model's GPUs
picked by its ``gpu_selector``. A target whose URL was not configured (``--gpu-metrics
auto`` trying the model server's own /metrics, which only the simulator fills with
DCGM names) turns off silently: a vLLM without GPU series is no warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from attnload.scrape.dcgm import GpuExposition, parse_dcgm
from attnload.scrape.gpuwindow import GpuSample, GpuWindow
from attnload.scrape.parse import ServerMetricsError
from attnload.scrape.poller import DEFAULT_INTERVAL_S, Fetch, ScrapeTarget, ServerMetricsPoller

log = logging.getLogger(__name__)

OnSample = Callable[[str, GpuSample], None]
MISSES_BEFORE_OFF = 3
"""Scrapes in a row whose GPUs match no model's selector before that model's GPU view turns off: a
Service in front of several nodes' exporters answers from a different node each time."""


@dataclass(frozen=True)
class GpuTarget(ScrapeTarget):
    """One model's GPU source: its URL, the names it may go by, its label selector."""

    selector: tuple[tuple[str, str], ...] = ()
    """``gpu_selector`` as (label, regex) pairs; empty: the simulator's ``pod`` = model, else all GPUs."""
    explicit: bool = True
    """The URL came from ``gpu_metrics_url`` (a failure warns); False: guessed (fails quietly)."""


class GpuMetricsPoller(ServerMetricsPoller):
    """Polls the GPU targets and keeps one ``GpuWindow`` per model key (and a whole-run one)."""

    parse = staticmethod(parse_dcgm)
    window_type = GpuWindow

    def __init__(
        self,
        targets: Sequence[GpuTarget],
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        fetch: Fetch | None = None,
        on_sample: OnSample | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(targets, interval_s=interval_s, fetch=fetch, **kwargs)  # type: ignore[arg-type]
        self.gpu_targets: Mapping[str, GpuTarget] = {t.key: t for t in targets}
        self._on_sample = on_sample
        self._misses: dict[str, int] = {}

    def _record(self, url: str, exposition: GpuExposition) -> None:  # type: ignore[override]
        at_s = self._clock()
        with self._lock:
            for key, target in self.gpu_targets.items():
                if target.url != url or key in self._off:
                    continue
                rows = exposition.select(dict(target.selector), target.names)
                if rows:
                    sample = GpuSample(source=exposition.source, at_s=at_s, readings=tuple(rows))
                    self._windows[key].add(sample)
                    self._totals[key].add(sample)
                    if self._on_sample is not None:
                        self._on_sample(key, sample)
                elif self._windows[key].last is None and self._missed(key) >= MISSES_BEFORE_OFF:
                    wanted = ", ".join(f"{k}=~{v!r}" for k, v in target.selector) or "its pod name"
                    self._turn_off(
                        [key],
                        f"{url} serves {len(exposition.readings)} GPU series, none matches {wanted} (fix gpu_selector)",
                    )

    def _missed(self, key: str) -> int:
        self._misses[key] = self._misses.get(key, 0) + 1
        return self._misses[key]

    def _turn_off(self, keys: Collection[str], why: str) -> None:
        quiet = [k for k in keys if not self.gpu_targets[k].explicit]
        loud = [k for k in keys if self.gpu_targets[k].explicit]
        for key in quiet:
            self._off[key] = why
        if quiet:
            log.debug("gpu metrics off for %s: %s", ", ".join(quiet), why)
        if loud:
            for key in loud:
                self._off[key] = why
            log.warning("gpu metrics off for %s: %s", ", ".join(loud), why)

    def explain(self, exc: ServerMetricsError) -> str:
        hints = {
            "http": "no dcgm-exporter /metrics there; fix gpu_metrics_url or pass --gpu-metrics off",
            "connection": "nothing answered; point gpu_metrics_url at dcgm-exporter (port 9400)",
            "not_prometheus": "the body is not Prometheus text; point gpu_metrics_url at dcgm-exporter",
            "no_dcgm": "Prometheus text, but no DCGM_FI_* fields in it",
            "too_large": "the body is too large for a metrics page",
        }
        return f"{exc.detail} ({hints.get(exc.reason, exc.reason)})"
