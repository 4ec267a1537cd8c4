"""The chat user: closed-loop (and paired) sending, and how each record reaches Locust and the runtime."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Mapping
from dataclasses import replace

import gevent
from gevent import GreenletExit
from locust import User, constant, task
from locust.env import Environment

from attnload.client.chat import Cancelled, ChatClient, chat_body
from attnload.config.model import ModelTarget
from attnload.measure.paired import send_together
from attnload.measure.recorder import RequestRecord
from attnload.measure.requestlog import NOBODY, Who
from attnload.runner.dialogs import Session, with_reply_tokens
from attnload.runner.openloop import PAIR_STREAM, ClientPool
from attnload.runner.runtime import Runtime
from attnload.workload.prompts import PlannedRequest

log = logging.getLogger(__name__)
OPEN_LOOP_IDLE_S = 0.2
_OPEN_CONVERSATIONS = itertools.count(1)
"""Open-loop conversations started by this process (their ids in ``--requests-out``)."""


class ChatUser(User):
    """A closed-loop user: sends the next request as soon as the previous one finished.

    With ``--paired`` one user sends each prompt to every model at once and waits for
    all answers. Open-loop stages (``rate:``) run no users: a scheduler per process
    sends instead (``openloop.py``).
    """

    abstract = True
    wait_time = constant(0)
    _pilot: str | None = None
    """The pace key while this user is its model's pilot and has not sent yet (``startspread.py``)."""

    def on_start(self) -> None:
        runtime: Runtime = self.environment.attnload  # type: ignore[attr-defined]
        self.runtime = runtime
        runtime.spawned += 1
        self.user_no = runtime.spawned
        self.who = Who(user=self.user_no)
        if runtime.paired is not None:
            self.targets = runtime.assign_all()
            self.chats = {t.key: chat_client(runtime, t) for t in self.targets}
        else:
            self.target = runtime.assign_model()
            self.chat = chat_client(runtime, self.target)
        keys = [t.key for t in self.targets] if runtime.paired is not None else [self.target.key]
        self.session = runtime.traffic.session(keys) if runtime.traffic.conversational else None
        self.sizer = runtime.traffic.sizer(keys)
        # Users started together must not stay in phase: the first request waits its offset (startspread.py).
        pace = PAIR_STREAM if runtime.paired is not None else self.target.key
        self._pilot = pace if runtime.start_spread.first_request(pace, runtime.stage.index, keys) else None

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
        if self._pilot is not None:
            self._pilot_request(self._pilot)
            return
        if self.session is not None:
            self._converse(self.session)
            return
        plan = runtime.workload.next(self.sizer)
        stage = runtime.stage_for(time.perf_counter())
        if runtime.paired is not None:
            send_pair(self.environment, runtime, self.chats, plan, stage, None, self.who)
            return
        send_plan(self.environment, runtime, self.chat, self.target, plan, stage, None, self.who)

    def _pilot_request(self, pace: str) -> None:
        """The first stage's pilot: its first answer tells the waiting users how long a request takes."""
        self._pilot = None
        started = time.perf_counter()
        try:
            self.chat_completion()
        finally:
            keys = [t.key for t in self.targets] if self.runtime.paired is not None else [self.target.key]
            self.runtime.start_spread.pilot_done(pace, keys, time.perf_counter() - started)

    def _converse(self, session: Session) -> None:
        """One step of this user's conversation: think (after the previous answer), send, keep the reply."""
        runtime = self.runtime
        step = session.next()
        if step.think_s > 0:
            gevent.sleep(step.think_s)
        stage = runtime.stage_for(time.perf_counter())
        who = Who(self.user_no, f"w{runtime.worker_index}u{self.user_no}c{session.conversations}")
        if runtime.paired is not None:
            session.replied(send_pair(self.environment, runtime, self.chats, step.plans, stage, None, who))
            return
        key = self.target.key
        session.replied(
            {key: send_plan(self.environment, runtime, self.chat, self.target, step.plans[key], stage, None, who)}
        )


def converse_open(
    environment: Environment, runtime: Runtime, pool: ClientPool, stream: str, intended: float, stage: int
) -> None:
    """Open loop: one arrival starts a conversation; each next turn is due its think time after the last answer."""
    targets = {t.key: t for t in runtime.config.models}
    keys = list(targets) if stream == PAIR_STREAM else [stream]
    session = runtime.traffic.session(keys)
    step = session.next()
    who = Who(conversation=f"w{runtime.worker_index}o{next(_OPEN_CONVERSATIONS)}")
    while True:
        clients = {key: pool.acquire(key) for key in keys}
        try:
            if stream == PAIR_STREAM:
                records = send_pair(environment, runtime, clients, step.plans, stage, intended, who)
            else:
                records = {
                    stream: send_plan(
                        environment, runtime, clients[stream], targets[stream], step.plans[stream], stage, intended, who
                    )
                }
        finally:
            for key, client in clients.items():
                pool.release(key, client)
        session.replied(records)
        if not session.continues():
            return
        step = session.next()
        intended = time.perf_counter() + step.think_s  # due after the answer + think time; lateness counts
        if step.think_s > 0:
            gevent.sleep(step.think_s)


def chat_client(runtime: Runtime, target: ModelTarget) -> ChatClient:
    return ChatClient(
        target.chat_url,
        runtime.api_keys[target.key],
        runtime.timeouts,
        retry_after_max_s=runtime.config.request.retry_after_max_s,
    )


def send_plan(
    environment: Environment,
    runtime: Runtime,
    client: ChatClient,
    target: ModelTarget,
    plan: PlannedRequest,
    stage: int,
    intended_start: float | None,
    who: Who = NOBODY,
) -> RequestRecord:
    """Send one planned request and report it; a stop mid-request is recorded, then ends the greenlet."""
    request = runtime.config.request
    body = chat_body(
        target.id,
        plan.messages,
        max_tokens=plan.max_tokens,
        temperature=request.temperature,
        stream=request.stream,
        ignore_eos=plan.ignore_eos,
    )
    capture = plan.turn is not None or target.tokenizer is not None  # only then is the text kept
    abandon = runtime.abandoner.draw(runtime.worker_index) if runtime.abandoner is not None else None
    try:
        record = client.send(
            body,
            model_key=target.key,
            profile=plan.profile,
            stage=stage,
            intended_start=intended_start,
            capture_text=capture,
            abandon=abandon,
        )
    except Cancelled as cancelled:
        _report(environment, runtime, _annotated(runtime, cancelled.record, plan, target, intended_start), who)
        raise GreenletExit() from None
    return _report(environment, runtime, _annotated(runtime, record, plan, target, intended_start), who)


def _annotated(
    runtime: Runtime, record: RequestRecord, plan: PlannedRequest, target: ModelTarget, intended_start: float | None
) -> RequestRecord:
    """Turn index, open-loop send time and tokenizer counts, only where they apply (the common case is as-is)."""
    if plan.turn is None and intended_start is None and target.tokenizer is None:
        return record
    sent_at = None
    if intended_start is not None:
        started = intended_start + (record.dispatch_lag_s or 0.0)
        sent_at = time.time() - (time.perf_counter() - started)
    record = replace(record, turn=plan.turn, sent_at=sent_at)
    if target.tokenizer is not None:
        record = with_reply_tokens(record, runtime.traffic.tokens[target.key], plan.messages)
    return record


def send_pair(
    environment: Environment,
    runtime: Runtime,
    clients: dict[str, ChatClient],
    plan: PlannedRequest | Mapping[str, PlannedRequest],
    stage: int,
    intended_start: float | None,
    who: Who = NOBODY,
) -> dict[str, RequestRecord]:
    """The same prompt to every model at once; the pair's differences go to the paired recorder.

    A conversation turn gives each model its own plan: the same script, each with its own history.
    """
    targets = {t.key: t for t in runtime.config.models}
    plans = plan if isinstance(plan, Mapping) else dict.fromkeys(clients, plan)
    keys = runtime.paired.send_order(list(clients)) if runtime.paired is not None else list(clients)
    records = send_together(
        keys,
        lambda key: send_plan(environment, runtime, clients[key], targets[key], plans[key], stage, intended_start, who),
    )
    done = {k: r for k, r in records.items() if isinstance(r, RequestRecord)}
    if runtime.paired is not None:
        runtime.paired.add(stage, done)
    return done


def _report(environment: Environment, runtime: Runtime, record: RequestRecord, who: Who = NOBODY) -> RequestRecord:
    if record.outcome == "ok" and runtime.config.slo.is_set:
        record = replace(record, good=runtime.is_good(record.ttft_s, record.itl_samples, record.e2e_s))
    runtime.observe(record, who)
    if record.outcome in ("cancelled", "abandoned"):
        return record  # not a server fault: kept out of Locust's failure table
    exception = None if record.outcome == "ok" else _LocustFailure(f"{record.error}")
    environment.events.request.fire(
        request_type="POST",
        name=record.model_key,
        response_time=record.e2e_s * 1000.0,
        response_length=record.completion_tokens,
        exception=exception,
        context={"profile": record.profile},
    )
    return record


class _LocustFailure(Exception):
    """How a classified failure shows in Locust's failures table (the class name only)."""
