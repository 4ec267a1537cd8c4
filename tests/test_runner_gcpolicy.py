"""The worker GC policy: no automatic full collections, a periodic one instead (gcpolicy.py)."""

from __future__ import annotations

import gc
import weakref

import gevent

from attnload.runner.gcpolicy import NO_AUTOMATIC_FULL_COLLECTION, quiet_full_collections


class Node:
    pass


def test_full_collections_are_periodic_not_automatic() -> None:
    saved = gc.get_threshold()
    collector = None
    gc.disable()  # only the policy's own collection may free the cycle below
    try:
        collector = quiet_full_collections(interval_s=0.05)
        assert gc.get_threshold() == (saved[0], saved[1], NO_AUTOMATIC_FULL_COLLECTION)
        assert gc.get_freeze_count() > 0  # what was alive at set-up is never scanned again
        cycle = Node()
        cycle.self = cycle  # type: ignore[attr-defined]
        alive = weakref.ref(cycle)
        del cycle
        assert alive() is not None
        gevent.sleep(0.2)
        assert alive() is None, "the periodic full collection did not run"
    finally:
        if collector is not None:
            collector.kill()
        gc.unfreeze()
        gc.set_threshold(*saved)
        gc.enable()
