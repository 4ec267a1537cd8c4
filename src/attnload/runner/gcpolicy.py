"""Keep CPython's cyclic GC from pausing a load-generating process in mid-measurement.

A worker holding thousands of streams keeps ~70 live objects per stream. CPython runs a
full (generation-2) collection whenever the objects promoted since the last one exceed a
quarter of the long-lived ones, and requests that live for seconds and are then freed by
reference counting promote objects all the time: at 10,000 streams over 4 workers
(``bench/scale.py``) each worker ran a full collection every few seconds over ~200k
objects, pausing 100–480 ms, which reads as TTFT, ITL and dispatch lag. Almost none of
it was garbage (~750 cyclic objects per worker in 45 s).

So load-generating processes freeze what is alive once set up (Locust, gevent and our
modules are never garbage), keep the young generations as they are (cheap, and they catch
short-lived cycles), and replace the automatic full collection with one every
``FULL_COLLECT_INTERVAL_S`` so a long soak's memory stays bounded.
"""

from __future__ import annotations

import gc
import logging
import time

import gevent

log = logging.getLogger(__name__)

FULL_COLLECT_INTERVAL_S = 600.0
NO_AUTOMATIC_FULL_COLLECTION = 1_000_000_000
"""Generation-2 threshold: that many generation-1 collections before an automatic full one."""


def quiet_full_collections(interval_s: float = FULL_COLLECT_INTERVAL_S) -> gevent.Greenlet:
    """Apply the policy to this process; returns the greenlet that runs the periodic collection."""
    gc.collect()
    gc.freeze()
    gen0, gen1, _ = gc.get_threshold()
    gc.set_threshold(gen0, gen1, NO_AUTOMATIC_FULL_COLLECTION)
    return gevent.spawn(_collect_every, interval_s)


def _collect_every(interval_s: float) -> None:
    while True:
        gevent.sleep(interval_s)
        started = time.perf_counter()
        collected = gc.collect()
        log.debug("full GC: %d objects collected in %.0f ms", collected, (time.perf_counter() - started) * 1000)
