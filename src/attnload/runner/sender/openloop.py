"""Open-loop arrivals (``--shape rate:...``): send times fixed in advance, latency from the intended time.

A closed-loop user waits for its previous answer, so a slow server slows the client and
hides its own queueing (coordinated omission). Here each worker runs one scheduler
greenlet per stage. At the stage start it computes its share of every model's arrival
times (:func:`arrival_offsets`, seeded, so the fleet's union is the whole schedule) and
then, for each arrival, spawns one request greenlet at the intended instant, from an
absolute deadline, never a chain of relative sleeps. A request takes a keep-alive
:class:`ApiClient` from a bounded per-model pool; when the pool is exhausted it waits,
and that wait counts: ``ApiClient.send(intended_start=...)`` measures latency from the
intended time and records ``dispatch_lag_s``. A stalled client therefore shows up as
lag and latency, and the stage keeps its send count (it is flagged ``client_behind``
in the results, not silently slowed). While a model's server refuses connections its clients back off
(``client/backoff.py``): arrivals due inside the backoff are counted ``dropped``, not sent.
"""

from __future__ import annotations

import heapq
import logging
import random
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import gevent
import gevent.pool
import gevent.queue
from gevent import Greenlet

from attnload.client.backoff import Backoff
from attnload.client.chat import ApiClient
from attnload.config.model import ModelTarget
from attnload.workload.arrivals import gamma_offsets
from attnload.workload.prompts import PlannedRequest

log = logging.getLogger(__name__)

Arrivals = str
"""``poisson`` or ``constant`` (``gamma`` runs :func:`gamma_offsets` instead, from ``burstiness``)."""
PAIR_STREAM = "*"
"""Stream key of a paired schedule: each arrival sends one prompt to every model."""


def arrival_offsets(
    rate_rps: float,
    duration_s: float,
    *,
    arrivals: Arrivals,
    share_index: int,
    share_count: int,
    seed: int,
    stage: int,
    stream: int,
    streams: int = 1,
) -> list[float]:
    """This share's arrival times, in seconds after the stage start, sorted.

    The stage sends ``round(rate · duration)`` requests in all, split over
    ``share_count`` workers. ``constant``: evenly spaced, worker ``w`` taking every
    ``share_count``-th slot, streams (models) phase-shifted so they do not fire
    together. ``poisson``: the arrival times of a Poisson process conditioned on that
    count, i.e. independent uniform draws over the stage (their gaps are exponential);
    the union over workers is again such a process, and the achieved rate equals the
    target instead of wandering by ±1/√n.
    """
    if rate_rps <= 0 or duration_s <= 0 or share_count < 1:
        return []
    total = round(rate_rps * duration_s)
    share_index %= share_count
    if arrivals == "constant":
        period_s = 1.0 / rate_rps
        phase_s = period_s * (stream % max(streams, 1)) / max(streams, 1)
        return [phase_s + j * period_s for j in range(share_index, total, share_count)]
    mine = total // share_count + (1 if share_index < total % share_count else 0)
    rng = random.Random(zlib.crc32(f"{seed}:{stage}:{stream}:{share_index}".encode()))
    return sorted(rng.uniform(0.0, duration_s) for _ in range(mine))


@dataclass(frozen=True)
class OpenStage:
    """What one worker's scheduler needs to run a rate stage."""

    index: int
    rates_rps: dict[str, float]
    """Per model key (or :data:`PAIR_STREAM` for paired mode): requests/s for the whole fleet."""
    started_perf: float
    duration_s: float
    warmup_s: float
    share_index: int
    share_count: int


SendPlan = Callable[[ApiClient, ModelTarget, PlannedRequest, int, float], object]
"""``(client, target, plan, stage, intended_start)``: send and report one request."""
SendPair = Callable[[dict[str, ApiClient], PlannedRequest, int, float], object]


class ClientPool:
    """Idle keep-alive clients per model, at most ``limit`` open; the newest idle one is reused."""

    def __init__(self, targets: list[ModelTarget], make: Callable[[ModelTarget], ApiClient], limit: int) -> None:
        self.limit = limit
        self._make = make
        self._targets = {t.key: t for t in targets}
        self._idle: dict[str, gevent.queue.LifoQueue] = {t.key: gevent.queue.LifoQueue() for t in targets}
        self._opened: dict[str, int] = dict.fromkeys(self._targets, 0)

    def acquire(self, key: str) -> ApiClient:
        """A client for model ``key``; blocks while ``limit`` are busy (the wait is dispatch lag)."""
        idle = self._idle[key]
        if idle.qsize() == 0 and self._opened[key] < self.limit:
            self._opened[key] += 1
            return self._make(self._targets[key])
        client: ApiClient = idle.get()
        return client

    def release(self, key: str, client: ApiClient) -> None:
        self._idle[key].put(client)

    def close(self) -> None:
        for idle in self._idle.values():
            while idle.qsize():
                idle.get_nowait().close()


class OpenLoop:
    """One worker's open-loop scheduler and its in-flight requests."""

    def __init__(
        self,
        targets: list[ModelTarget],
        pool: ClientPool,
        next_plan: Callable[..., PlannedRequest],
        send: SendPlan,
        send_pair: SendPair | None,
        arrivals: Arrivals,
        seed: int,
    ) -> None:
        self.targets = {t.key: t for t in targets}
        self.pool = pool
        self.next_plan = next_plan
        """``next_plan(stream)``: the next single-turn request for that stream (its model sizes the prompt)."""
        self.send = send
        self.send_pair = send_pair
        self.arrivals = arrivals
        self.seed = seed
        self.burstiness: float | None = None
        """``--burstiness``: gamma gaps of this shape from one fleet-wide schedule (``workload/arrivals.py``)."""
        self._scheduler: Greenlet | None = None
        self._requests = gevent.pool.Group()
        self.scheduled = 0
        self.planned: Callable[[OpenStage], Iterable[tuple[float, str, PlannedRequest]]] | None = None
        """Replay: the stage's arrivals with their requests fixed in advance (instead of rate × next_plan)."""
        self.arrival: Callable[[str, float, int], object] | None = None
        """Conversations: ``(stream, intended, stage)`` runs what one arrival starts (all its turns)."""
        self.on_error: Callable[[BaseException | None], object] | None = None
        """Told when a schedule greenlet raises (every later arrival of the stage is lost)."""
        self.backoffs: dict[str, Backoff] = {}
        """Per model key: the connection backoff its pooled clients share (``client/backoff.py``)."""
        self.stopped: Callable[[str], bool] = lambda key: False
        """Whether a model's users stopped (runner/sender/giveup.py): its arrivals are dropped too."""
        self.on_dropped: Callable[[str, str, int], object] | None = None
        """``(model key, profile, stage)``: an arrival fell inside its model's backoff and was not sent."""

    def start_stage(self, stage: OpenStage) -> None:
        """Replace the running schedule (requests in flight keep going, tagged with their stage)."""
        self.stop_schedule()
        self._scheduler = gevent.spawn(self._run, stage)
        if self.on_error is not None:
            on_error = self.on_error
            self._scheduler.link_exception(lambda greenlet: on_error(greenlet.exception))

    def stop_schedule(self) -> None:
        if self._scheduler is not None:
            self._scheduler.kill(block=False)
            self._scheduler = None

    def stop(self) -> None:
        """The test stopped: no more arrivals; requests in flight end as ``cancelled``."""
        self.stop_schedule()
        self._requests.kill(block=True, timeout=10)
        self.pool.close()

    def schedule(self, stage: OpenStage) -> list[tuple[float, str]]:
        """``(perf_counter time, stream)`` of this worker's arrivals, merged over streams."""
        streams = sorted(stage.rates_rps)
        per_stream = [
            [(stage.started_perf + offset, key) for offset in self._offsets(stage, key, position, len(streams))]
            for position, key in enumerate(streams)
        ]
        return list(heapq.merge(*per_stream))

    def _offsets(self, stage: OpenStage, key: str, position: int, streams: int) -> list[float]:
        if self.burstiness is not None:
            return gamma_offsets(
                stage.rates_rps[key],
                stage.duration_s,
                self.burstiness,
                share_index=stage.share_index,
                share_count=stage.share_count,
                seed=self.seed,
                stage=stage.index,
                stream=position,
            )
        return arrival_offsets(
            stage.rates_rps[key],
            stage.duration_s,
            arrivals=self.arrivals,
            share_index=stage.share_index,
            share_count=stage.share_count,
            seed=self.seed,
            stage=stage.index,
            stream=position,
            streams=streams,
        )

    def _run(self, stage: OpenStage) -> None:
        arrivals: Iterable[tuple[float, str, PlannedRequest | None]]
        if self.planned is not None:
            arrivals = self.planned(stage)  # in time order, built lazily
        else:
            arrivals = [(intended, stream, None) for intended, stream in self.schedule(stage)]
        for intended, stream, plan in arrivals:
            delay = intended - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)  # from the absolute schedule: lateness never accumulates
            tag = stage.index if intended - stage.started_perf >= stage.warmup_s else -1
            self.scheduled += 1
            self._requests.spawn(self._one, stream, intended, tag, plan)

    def _backing_off(self, stream: str) -> list[str]:
        """The models of ``stream`` whose backoff is running now, or that gave up (empty: send)."""
        keys = list(self.targets) if stream == PAIR_STREAM else [stream]
        return [key for key in keys if self.stopped(key) or key in self.backoffs and self.backoffs[key].wait_s() > 0]

    def _drop(self, stream: str, stage: int, plan: PlannedRequest | None) -> None:
        """Count an arrival the backoff stops as ``dropped`` on each of its models (never silently skipped)."""
        if self.on_dropped is None:
            return
        if plan is None and self.arrival is None:
            plan = self.next_plan(stream)  # the request it would have been: its profile carries the count
        profile = plan.profile if plan is not None else ""
        for key in list(self.targets) if stream == PAIR_STREAM else [stream]:
            self.on_dropped(key, profile, stage)

    def _one(self, stream: str, intended: float, stage: int, plan: PlannedRequest | None = None) -> None:
        if self._backing_off(stream):
            self._drop(stream, stage, plan)
            return
        if plan is None and self.arrival is not None:
            self.arrival(stream, intended, stage)
            return
        plan = plan or self.next_plan(stream)
        if stream == PAIR_STREAM and self.send_pair is not None:
            clients = {key: self.pool.acquire(key) for key in self.targets}
            try:
                self.send_pair(clients, plan, stage, intended)
            finally:
                for key, client in clients.items():
                    self.pool.release(key, client)
            return
        client = self.pool.acquire(stream)
        try:
            self.send(client, self.targets[stream], plan, stage, intended)
        finally:
            self.pool.release(stream, client)
