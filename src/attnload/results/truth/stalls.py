"""Latencies without the requests a stalled worker held (``worker_stalled``): a fault is not the server's.

A worker that froze (SIGSTOP, a paused VM) or was cut off from the network (a partition) holds its
requests in flight across the silence; when it comes back their streams finish late, and their e2e
reads as if the server had stalled. The recorder keeps those requests' share of each latency apart
(``stalled_*`` histograms), and the whole minus that share is the same percentile without them —
exact per bucket, and mergeable across workers like the rest.
"""

from __future__ import annotations

from attnload.measure.histogram import GAMMA, LogHistogram
from attnload.measure.recorder import Series
from attnload.results.truth.fields import StalledExcluded


def without(whole: LogHistogram, part: LogHistogram) -> LogHistogram:
    """``whole`` with ``part``'s samples taken out (``part`` was recorded into ``whole`` too). The max is
    the top of the highest bucket left (within 2 %), never above the whole's."""
    rest = LogHistogram()
    rest.buckets = {i: n - part.buckets.get(i, 0) for i, n in whole.buckets.items() if n > part.buckets.get(i, 0)}
    rest.count = whole.count - part.count
    rest.total = max(whole.total - part.total, 0.0)
    if rest.buckets:
        rest.min = whole.min
        rest.max = min(whole.max, GAMMA ** (max(rest.buckets) + 1))
    return rest


def without_stalled(series: Series) -> StalledExcluded | None:
    """The TTFT, ITL and e2e percentiles without the stalled requests (None: no request was stalled)."""
    stalled = series.counts.get("stalled", 0)
    if not stalled:
        return None
    hists = series.hists
    ttft = without(hists["ttft"], hists["stalled_ttft"])
    itl = without(hists["itl"], hists["stalled_itl"])
    e2e = without(hists["e2e"], hists["stalled_e2e"])
    return StalledExcluded(
        requests=stalled,
        ttft_p99_s=ttft.quantile(0.99),
        e2e_p50_s=e2e.quantile(0.50),
        e2e_p99_s=e2e.quantile(0.99),
        itl_p99_s=itl.quantile(0.99),
    )
