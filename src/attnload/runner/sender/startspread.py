"""``--start-spread``: closed-loop users that start together must not stay in phase.

Why: closed-loop users whose first requests leave together stay in lock-step for the whole
run when the requests are alike (fixed lengths, ``ignore_eos``): every request then waits
for all the others' prefills and decodes without the prefill stalls a desynchronised load
of the same concurrency shows. Both are true measurements, of different arrival phases; a
user expects the closed loop not to synchronise by accident.

What (the default, ``auto``): each stage's *new* users send their first request at an
offset ``f·D`` after they start, where ``D`` is about one request's duration of their model
and ``f`` runs through the golden-ratio sequence ``frac(j·φ)`` (low-discrepancy: two or three
users already span more than half of ``D``), interleaved by worker index (``j = 1 + n·W + w``
for this process's ``n``-th new user of the model), so the offsets stay apart with any
number of workers. ``D``:

- later stages: the median end-to-end time this process observed for the model in its most
  recent stage with answers;
- the first stage, where nothing was observed yet: one user of the model (the *pilot*)
  starts at once, the others wait for its first answer and take its duration as ``D``
  (offsets count from that answer; the pilot's next request is phase 0). Across workers
  the master names one pilot per model and relays its ``D`` to every worker.

``D`` is capped at a quarter of the stage (at least 1 s), and so is the wait for a pilot.
Later stages rotate the sequence by a draw seeded from the config's ``seed``, the model and
the stage, so a rerun places the same users at the same offsets. A delayed first request is
simply sent later: latencies count from when it is sent. Open-loop and replay stages run no
users, so nothing here applies to them. ``off`` starts every user's loop at once (Locust's
own spawn timing); ``SECONDS`` spreads each stage's new users over that fixed duration.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from typing import Any

import gevent
from gevent.event import AsyncResult, Event

from attnload.measure.histogram import LogHistogram
from attnload.measure.recorder import Recorder

GOLDEN = 0.6180339887498949
STAGE_SHARE_CAP = 0.25
"""``D`` (and the wait for a pilot) never exceeds this share of the stage..."""
MIN_CAP_S = 1.0
"""...nor goes below this many seconds."""
NO_SHAPE_CAP_S = 15.0
"""The cap when no stage length is known (plain Locust without a shape)."""
CLAIM_TIMEOUT_S = 5.0
"""A worker that hears nothing from the master about a pilot within this becomes one itself."""

Mode = str | float
"""``auto``, ``off`` or seconds (``plan.options.parse_start_spread``)."""


def offset_fraction(j: int, rotation: float = 0.0) -> float:
    """The ``j``-th point of the golden-ratio sequence, rotated: in [0, 1)."""
    return (j * GOLDEN + rotation) % 1.0


def observed_duration_s(recorder: Recorder, model_keys: Iterable[str]) -> float | None:
    """Median e2e in each model's most recent stage with answers (the largest over ``model_keys``)."""
    found = []
    keys = set(model_keys)
    for key in keys:
        latest: dict[int, LogHistogram] = {}
        for (model, _profile, stage), series in recorder.series.items():
            hist = series.hists["e2e"]
            if model == key and hist.count:
                merged = latest.setdefault(stage, LogHistogram())
                merged.merge(hist)
        if latest:
            p50 = latest[max(latest)].quantile(0.5)
            if p50 is not None:
                found.append(p50)
    return max(found) if found else None


class StartSpread:
    """One per Locust process: decides when each new closed-loop user sends its first request."""

    def __init__(
        self,
        mode: Mode,
        *,
        stage_duration_s: float | None,
        seed: int,
        recorder: Recorder,
        placement: Callable[[], tuple[int, int]],
    ) -> None:
        self.mode = mode
        self.cap_s = max(MIN_CAP_S, STAGE_SHARE_CAP * stage_duration_s) if stage_duration_s else NO_SHAPE_CAP_S
        self.seed = seed
        self.recorder = recorder
        self.placement = placement
        """(worker index, worker count) of this process, read when a user starts."""
        self.ask_master: Callable[[str], None] | None = None
        """Workers: asks the master whether this worker runs the model's pilot (``runner/messages.py``)."""
        self.tell_master: Callable[[str, float], None] | None = None
        """Workers: tells the master (and through it every worker) a pilot's duration."""
        self.reset()

    def reset(self) -> None:
        self._learned: dict[str, tuple[float, float]] = {}  # key -> (D, perf time it became known)
        self._events: dict[str, Event] = {}
        self._claimed: set[str] = set()
        self._claims: dict[str, AsyncResult] = {}
        self._counts: dict[tuple[str, int], int] = {}

    # ------------------------------------------------------------------ users

    def first_request(self, key: str, stage: int, model_keys: Iterable[str]) -> bool:
        """Block until this new user of ``key`` may send its first request; True: it is the pilot,
        which must call :meth:`pilot_done` after that request."""
        if self.mode == "off":
            return False
        started = time.perf_counter()
        duration = self.mode if isinstance(self.mode, float) else observed_duration_s(self.recorder, model_keys)
        rotation = 0.0
        if duration is None and key in self._learned:
            duration = self._learned[key][0]
        if duration is None:
            if self._claim(key):
                return True
            duration, since = self._wait_for_pilot(key)
            started = max(started, since)
        elif not isinstance(self.mode, float):
            rotation = random.Random(f"{self.seed}/{key}/{stage}").random()
        n = self._counts.get((key, stage), 0)
        self._counts[(key, stage)] = n + 1
        index, count = self.placement()
        j = 1 + n * max(count, 1) + index
        due = started + offset_fraction(j, rotation) * min(duration, self.cap_s)
        wait = due - time.perf_counter()
        if wait > 0:
            gevent.sleep(wait)
        return False

    def pilot_done(self, key: str, model_keys: Iterable[str], elapsed_s: float) -> None:
        """The pilot's first request ended: its duration is ``D`` for the others (here and on every worker)."""
        duration = observed_duration_s(self.recorder, model_keys) or elapsed_s
        self.learn(key, duration)
        if self.tell_master is not None:
            self.tell_master(key, duration)

    def _claim(self, key: str) -> bool:
        if key in self._claimed:
            return False
        self._claimed.add(key)
        if self.ask_master is None:
            return True
        result: AsyncResult = AsyncResult()
        self._claims[key] = result
        self.ask_master(key)
        try:
            reply = result.get(timeout=CLAIM_TIMEOUT_S)
        except gevent.Timeout:
            return True  # no master answer: better a second pilot than users waiting for none
        finally:
            self._claims.pop(key, None)
        if reply.get("d") is not None:
            self.learn(key, float(reply["d"]))
            return False
        return bool(reply.get("pilot"))

    def _wait_for_pilot(self, key: str) -> tuple[float, float]:
        """``D`` and when it became known; after the cap without an answer, the cap from now."""
        event = self._events.setdefault(key, Event())
        event.wait(timeout=self.cap_s)
        if key in self._learned:
            return self._learned[key]
        return self.cap_s, time.perf_counter()

    def learn(self, key: str, duration_s: float) -> None:
        if key not in self._learned:
            self._learned[key] = (max(duration_s, 0.0), time.perf_counter())
        self._events.setdefault(key, Event()).set()

    def on_claimed(self, data: dict[str, Any]) -> None:
        """Worker: the master's answer to a claim."""
        result = self._claims.get(str(data.get("key")))
        if result is not None and not result.ready():
            result.set(data)


class PilotBoard:
    """The master's side of the pace: which worker runs each model's pilot, and the durations learned."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._learned: dict[str, float] = {}
        self._pilot_of: dict[str, str] = {}  # key -> node that runs its pilot

    def learn(self, key: str, duration_s: float) -> None:
        self._learned.setdefault(key, max(duration_s, 0.0))

    def on_claim(self, key: str, node: str) -> tuple[bool, float | None]:
        """The answer to a worker's claim: whether it runs the pilot (the first claimer of a model does),
        and ``D`` once a pilot has answered."""
        if key in self._learned:
            return False, self._learned[key]
        if key not in self._pilot_of:
            self._pilot_of[key] = node
            return True, None
        return self._pilot_of[key] == node, None
