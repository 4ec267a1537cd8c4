"""The chat user: closed-loop (and paired) sending, and how each record reaches Locust and the runtime."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import gevent
from gevent import GreenletExit
from locust import User, constant, task
from locust.env import Environment

from attnload.client.chat import Cancelled, ChatClient, chat_body
from attnload.config.model import ModelTarget
from attnload.measure.paired import send_together
from attnload.measure.recorder import RequestRecord
from attnload.runner.runtime import Runtime
from attnload.workload.prompts import PlannedRequest

log = logging.getLogger(__name__)
SPAWN_SPREAD_S = 1.0
GOLDEN_RATIO = 0.6180339887498949
OPEN_LOOP_IDLE_S = 0.2


class ChatUser(User):
    """A closed-loop user: sends the next request as soon as the previous one finished.

    With ``--paired`` one user sends each prompt to every model at once and waits for
    all answers. Open-loop stages (``rate:``) run no users: a scheduler per process
    sends instead (``openloop.py``).
    """

    abstract = True
    wait_time = constant(0)

    def on_start(self) -> None:
        runtime: Runtime = self.environment.attnload  # type: ignore[attr-defined]
        self.runtime = runtime
        # Locust dispatches users in one-second batches (floor(spawn rate) at a time). Spreading each
        # user's first request over that second makes the spawn rate an arrival rate; otherwise a batch
        # of identical requests prefills together and stays in lockstep, inflating TTFT for the run.
        # A golden-ratio sequence spreads them evenly without knowing the batch size.
        runtime.spawned += 1
        gevent.sleep(SPAWN_SPREAD_S * ((runtime.spawned * GOLDEN_RATIO) % 1.0))
        if runtime.paired is not None:
            self.targets = runtime.assign_all()
            self.chats = {t.key: chat_client(runtime, t) for t in self.targets}
            return
        self.target = runtime.assign_model()
        self.chat = chat_client(runtime, self.target)

    def on_stop(self) -> None:
        if self.runtime.paired is not None:
            for target in self.targets:
                self.runtime.release(target)
                self.chats[target.key].close()
            return
        self.runtime.release(self.target)
        self.chat.close()

    @task
    def chat_completion(self) -> None:
        runtime = self.runtime
        if runtime.stage.rates is not None:
            gevent.sleep(OPEN_LOOP_IDLE_S)  # an open-loop stage: the scheduler sends, users being stopped idle
            return
        plan = runtime.workload.next()
        stage = runtime.stage_for(time.perf_counter())
        if runtime.paired is not None:
            send_pair(self.environment, runtime, self.chats, plan, stage, None)
            return
        send_plan(self.environment, runtime, self.chat, self.target, plan, stage, None)


def chat_client(runtime: Runtime, target: ModelTarget) -> ChatClient:
    return ChatClient(target.chat_url, runtime.api_keys[target.key], runtime.timeouts,
                      retry_after_max_s=runtime.config.request.retry_after_max_s)


def send_plan(environment: Environment, runtime: Runtime, client: ChatClient, target: ModelTarget,
              plan: PlannedRequest, stage: int, intended_start: float | None) -> RequestRecord:
    """Send one planned request and report it; a stop mid-request is recorded, then ends the greenlet."""
    request = runtime.config.request
    body = chat_body(target.id, plan.messages, max_tokens=plan.max_tokens, temperature=request.temperature,
                     stream=request.stream, ignore_eos=plan.ignore_eos)
    try:
        record = client.send(body, model_key=target.key, profile=plan.profile, stage=stage,
                             intended_start=intended_start)
    except Cancelled as cancelled:
        _report(environment, runtime, cancelled.record)
        raise GreenletExit() from None
    return _report(environment, runtime, record)


def send_pair(environment: Environment, runtime: Runtime, clients: dict[str, ChatClient], plan: PlannedRequest,
              stage: int, intended_start: float | None) -> None:
    """The same prompt to every model at once; the pair's differences go to the paired recorder."""
    targets = {t.key: t for t in runtime.config.models}
    keys = runtime.paired.send_order(list(clients)) if runtime.paired is not None else list(clients)
    records = send_together(keys, lambda key: send_plan(
        environment, runtime, clients[key], targets[key], plan, stage, intended_start))
    if runtime.paired is not None:
        runtime.paired.add(stage, {k: r for k, r in records.items() if isinstance(r, RequestRecord)})


def _report(environment: Environment, runtime: Runtime, record: RequestRecord) -> RequestRecord:
    if record.outcome == "ok" and runtime.config.slo.is_set:
        record = replace(record, good=runtime.is_good(record.ttft_s, record.itl_samples, record.e2e_s))
    runtime.observe(record)
    if record.outcome == "cancelled":
        return record  # not a server fault: kept out of Locust's failure table
    exception = None if record.outcome == "ok" else _LocustFailure(f"{record.error}")
    environment.events.request.fire(
        request_type="POST", name=record.model_key, response_time=record.e2e_s * 1000.0,
        response_length=record.completion_tokens, exception=exception, context={"profile": record.profile})
    return record


class _LocustFailure(Exception):
    """How a classified failure shows in Locust's failures table (the class name only)."""
