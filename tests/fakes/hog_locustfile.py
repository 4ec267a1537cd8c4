"""The packaged locustfile plus a greenlet that keeps the hub busy: a genuinely CPU-bound client.

``locust -f tests/fakes/hog_locustfile.py`` with the ``ATTNLOAD_*`` environment: the same users and
shape as `attnload run`, but every 35 ms the process spins for ``HOG_MS`` (default 30) without
yielding, so its event loop runs late and its reads back up, as a client past its capacity does.
"""

import os
import time
from typing import Any

import gevent
from locust import events

from attnload.commands.locustfile import Chat, Shape

__all__ = ["Chat", "Shape"]

HOG_S = float(os.environ.get("HOG_MS", "30")) / 1000.0


def _hog() -> None:
    while True:
        end = time.perf_counter() + HOG_S
        while time.perf_counter() < end:
            pass
        gevent.sleep(0.005)


@events.test_start.add_listener
def _start_hog(**_: Any) -> None:
    gevent.spawn(_hog)
