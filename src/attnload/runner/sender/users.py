"""The chat user and the open loop's sends: closed-loop (and paired) sending, and how each record reaches Locust
and the sender."""

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

from attnload.apis import request_body
from attnload.client.backoff import Backoff
from attnload.client.chat import ApiClient, Cancelled
from attnload.client.classify import TOOL_CHOICE_FIX
from attnload.config.model import ModelTarget
from attnload.measure.paired import send_together
from attnload.measure.recorder import RequestRecord
from attnload.measure.requestlog import NOBODY, Who
from attnload.runner.sender.dialogs import Session, Step, with_reply_tokens
from attnload.runner.sender.openloop import PAIR_STREAM, ClientPool, OpenLoop
from attnload.runner.sender.replay import ReplaySchedule
from attnload.runner.sender.sender import Sender
from attnload.runner.sender.sessionreplay import SessionReplay
from attnload.workload.prompts import PlannedRequest
from attnload.workload.sessiontrace import is_session_trace

log = logging.getLogger(__name__)
OPEN_LOOP_IDLE_S = 0.2
LOCKSTEP_IDLE_S = 0.05
"""How often a decode sweep's user that has sent its request looks for the next stage."""
_OPEN_CONVERSATIONS = itertools.count(1)
"""Open-loop conversations started by this process (their ids in ``--requests-out``)."""
_TOLD_TOOL_CHOICE: set[str] = set()
"""Models whose tool-choice refusal this process has already explained (once each)."""


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
    _sent_stage = -1
    """A lockstep stage (decode sweep) this user has sent its one request in."""

    def on_start(self) -> None:
        sender = self.environment.attnload.sender
        assert sender is not None  # users run where a sender is: a worker or a single process
        self.sender: Sender = sender
        sender.spawned += 1
        self.user_no = sender.spawned
        self.who = Who(user=self.user_no)
        paired = sender.state.paired is not None
        if paired:
            self.targets = sender.assign_all()
            self.chats = {t.key: chat_client(sender, t) for t in self.targets}
        else:
            self.target = sender.assign_model()
            self.chat = chat_client(sender, self.target)
        keys = [t.key for t in self.targets] if paired else [self.target.key]
        self.session = sender.traffic.session(keys) if sender.traffic.conversational else None
        self.keys = keys
        # Users started together must not stay in phase: the first request waits its offset (startspread.py).
        pace = PAIR_STREAM if paired else self.target.key
        stage = sender.state.stage.index
        self._pilot = pace if sender.start_spread.first_request(pace, stage, keys) else None
        sender.first_requests.note(keys, stage, time.time())  # the task sends it next (wait_time 0)

    def on_stop(self) -> None:
        if self.sender.state.paired is not None:
            for target in self.targets:
                self.sender.release(target)
                self.chats[target.key].close()
            return
        self.sender.release(self.target)
        self.chat.close()

    @task
    def send_request(self) -> None:
        sender, state = self.sender, self.sender.state
        if state.stage.rates is not None or any(k in sender.giveup.stopped for k in self.keys):
            gevent.sleep(OPEN_LOOP_IDLE_S)  # an open-loop stage (the scheduler sends) or a model given up: idle
            return
        if state.options.shape is not None and state.options.shape.lockstep:
            if self._sent_stage == state.stage.index:
                gevent.sleep(LOCKSTEP_IDLE_S)  # one request per user and stage: wait for the next batch
                return
            self._sent_stage = state.stage.index
        if self._pilot is not None:
            self._pilot_request(self._pilot)
            return
        if self.session is not None:
            self._converse(self.session)
            return
        plan = state.workload.next(sender.traffic.sizer(self.keys))  # per request: a calibration is learned
        stage = state.stage_for(time.perf_counter())
        if state.paired is not None:
            send_pair(self.environment, sender, self.chats, plan, stage, None, self.who)
            return
        send_plan(self.environment, sender, self.chat, self.target, plan, stage, None, self.who)

    def _pilot_request(self, pace: str) -> None:
        """The first stage's pilot: its first answer tells the waiting users how long a request takes."""
        self._pilot = None
        started = time.perf_counter()
        try:
            self.send_request()
        finally:
            keys = [t.key for t in self.targets] if self.sender.state.paired is not None else [self.target.key]
            self.sender.start_spread.pilot_done(pace, keys, time.perf_counter() - started)

    def _converse(self, session: Session) -> None:
        """One step of this user's conversation: think (after the previous answer), send, keep the reply."""
        sender, state = self.sender, self.sender.state
        step = session.next()
        if step.think_s > 0:
            gevent.sleep(step.think_s)
        stage = state.stage_for(time.perf_counter())
        who = Who(self.user_no, f"w{state.worker_index}u{self.user_no}c{session.conversations}")
        if state.paired is not None:
            session.replied(send_pair(self.environment, sender, self.chats, step.plans, stage, None, who))
            session.run_children(lambda key, plan: send_child(self.environment, sender, key, plan, stage, None))
            return
        key = self.target.key
        session.replied(
            {key: send_plan(self.environment, sender, self.chat, self.target, step.plans[key], stage, None, who)}
        )
        session.run_children(lambda key, plan: send_child(self.environment, sender, key, plan, stage, None))


def converse_open(
    environment: Environment, sender: Sender, pool: ClientPool, stream: str, intended: float, stage: int
) -> None:
    """Open loop: one arrival starts a conversation; each next turn is due its think time after the last answer."""
    keys = [t.key for t in sender.state.config.models] if stream == PAIR_STREAM else [stream]
    session = sender.traffic.session(keys)
    step = session.next()
    who = Who(conversation=f"w{sender.state.worker_index}o{next(_OPEN_CONVERSATIONS)}")
    _converse_open(environment, sender, pool, session, step, who, (stream, intended, stage))
    session.close()  # an agent session's tally is filed (a stop mid-session files nothing)


def _converse_open(
    environment: Environment,
    sender: Sender,
    pool: ClientPool,
    session: Session,
    step: Step,
    who: Who,
    where: tuple[str, float, int],
) -> None:
    """The arrival's steps, each after the previous answer and its think (or tool) time."""
    stream, intended, stage = where
    targets = {t.key: t for t in sender.state.config.models}
    keys = list(targets) if stream == PAIR_STREAM else [stream]
    while True:
        clients = {key: pool.acquire(key) for key in keys}
        try:
            if stream == PAIR_STREAM:
                records = send_pair(environment, sender, clients, step.plans, stage, intended, who)
            else:
                records = {
                    stream: send_plan(
                        environment, sender, clients[stream], targets[stream], step.plans[stream], stage, intended, who
                    )
                }
        finally:
            for key, client in clients.items():
                pool.release(key, client)
        session.replied(records)
        session.run_children(lambda key, plan: send_child(environment, sender, key, plan, stage, None, pool))
        if not session.continues():
            return
        step = session.next()
        intended = time.perf_counter() + step.think_s  # due after the answer + think time; lateness counts
        if step.think_s > 0:
            gevent.sleep(step.think_s)


def send_child(
    environment: Environment,
    sender: Sender,
    key: str,
    plan: PlannedRequest,
    stage: int,
    intended: float | None,
    pool: ClientPool | None = None,
) -> RequestRecord:
    """One sub-agent request on its own connection (children run at once, beside their waiting parent)."""
    target = next(t for t in sender.state.config.models if t.key == key)
    client = pool.acquire(key) if pool is not None else chat_client(sender, target)
    try:
        return send_plan(environment, sender, client, target, plan, stage, intended)
    finally:
        if pool is not None:
            pool.release(key, client)
        else:
            client.close()


def chat_client(sender: Sender, target: ModelTarget, backoff: Backoff | None = None) -> ApiClient:
    """A closed-loop user's client, with its own connection backoff; the open loop's clients share their model's
    (``backoff``) and never sleep in it: an arrival inside it is dropped instead (``openloop.py``)."""
    request = sender.state.config.request
    return ApiClient(
        target.url,
        sender.api_keys[target.key],
        sender.timeouts,
        retry_after_max_s=request.retry_after_max_s,
        backoff=backoff or Backoff(request.connect_backoff_s, request.connect_backoff_max_s),
        waits_backoff=backoff is None,
        api=target.api,
        key_header=target.auth_header,
    )


def send_plan(
    environment: Environment,
    sender: Sender,
    client: ApiClient,
    target: ModelTarget,
    plan: PlannedRequest,
    stage: int,
    intended_start: float | None,
    who: Who = NOBODY,
) -> RequestRecord:
    """Send one planned request and report it; a stop mid-request is recorded, then ends the greenlet."""
    request = sender.state.config.request
    body = request_body(
        target.api,
        target.id,
        plan.messages,
        max_tokens=plan.max_tokens,
        temperature=request.temperature,
        stream=request.stream,
        ignore_eos=plan.ignore_eos,
        tools=plan.tools,
        tool_choice=plan.tool_choice,
    )
    # the text is kept only where it is resent (conversations, agent steps and sub-agents) or counted
    capture = plan.turn is not None or plan.step is not None or plan.tools is not None or target.tokenizer is not None
    abandon = sender.abandoner.draw(sender.state.worker_index) if sender.abandoner is not None else None
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
        _report(environment, sender, _annotated(sender, cancelled.record, plan, target, intended_start), who)
        raise GreenletExit() from None
    sender.traffic.learn(target, plan, record)
    if plan.tools is not None and record.outcome == "failed":
        _say_tool_choice(target, client)
    return _report(environment, sender, _annotated(sender, record, plan, target, intended_start), who)


def _say_tool_choice(target: ModelTarget, client: ApiClient) -> None:
    """vLLM refused ``tools`` for want of tool-call parsing: one line per model naming the server flags."""
    failure = client.last_failure
    if failure is None or TOOL_CHOICE_FIX not in failure.detail or target.key in _TOLD_TOOL_CHOICE:
        return
    _TOLD_TOOL_CHOICE.add(target.key)
    log.error("model %s: agent steps are refused with HTTP 400: %s", target.key, TOOL_CHOICE_FIX)


def _annotated(
    sender: Sender, record: RequestRecord, plan: PlannedRequest, target: ModelTarget, intended_start: float | None
) -> RequestRecord:
    """Turn index, open-loop send time and tokenizer counts, only where they apply (the common case is as-is)."""
    if (
        plan.turn is None
        and plan.step is None
        and intended_start is None
        and target.tokenizer is None
        and not plan.calibrated
    ):
        return record
    sent_at = None
    if intended_start is not None:
        started = intended_start + (record.dispatch_lag_s or 0.0)
        sent_at = time.time() - (time.perf_counter() - started)
    record = replace(record, turn=plan.turn, step=plan.step, sent_at=sent_at, prompt_calibrated=plan.calibrated)
    if target.tokenizer is not None:
        record = with_reply_tokens(record, sender.traffic.tokens[target.key], plan.messages)
    return record


def send_pair(
    environment: Environment,
    sender: Sender,
    clients: dict[str, ApiClient],
    plan: PlannedRequest | Mapping[str, PlannedRequest],
    stage: int,
    intended_start: float | None,
    who: Who = NOBODY,
) -> dict[str, RequestRecord]:
    """The same prompt to every model at once; the pair's differences go to the paired recorder.

    A conversation turn gives each model its own plan: the same script, each with its own history.
    """
    paired = sender.state.paired
    targets = {t.key: t for t in sender.state.config.models}
    plans = plan if isinstance(plan, Mapping) else dict.fromkeys(clients, plan)
    keys = paired.send_order(list(clients)) if paired is not None else list(clients)
    records = send_together(
        keys,
        lambda key: send_plan(environment, sender, clients[key], targets[key], plans[key], stage, intended_start, who),
    )
    done = {k: r for k, r in records.items() if isinstance(r, RequestRecord)}
    if paired is not None:
        paired.add(stage, done, keys)
    return done


def _report(environment: Environment, sender: Sender, record: RequestRecord, who: Who = NOBODY) -> RequestRecord:
    if record.outcome == "ok" and sender.state.config.slo.is_set:
        record = replace(record, good=sender.is_good(record.ttft_s, record.itl_samples, record.e2e_s))
    sender.observe(record, who)
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


def open_loop(environment: Environment, sender: Sender) -> OpenLoop:
    """This process's open-loop scheduler (idle until a rate stage begins)."""
    state = sender.state
    config = state.config
    request = config.request
    backoffs = {m.key: Backoff(request.connect_backoff_s, request.connect_backoff_max_s) for m in config.models}
    pool = ClientPool(
        list(config.models),
        lambda target: chat_client(sender, target, backoffs[target.key]),
        state.options.max_in_flight,
    )

    def send(client: ApiClient, target: ModelTarget, plan: PlannedRequest, stage: int, intended: float) -> None:
        send_plan(environment, sender, client, target, plan, stage, intended)

    def pair(clients: dict[str, ApiClient], plan: PlannedRequest, stage: int, intended: float) -> None:
        send_pair(environment, sender, clients, plan, stage, intended)

    keys = [m.key for m in config.models]

    def next_plan(stream: str) -> PlannedRequest:
        """A rate stage's next request, sized by the stream's model (paired: the first model's tokenizer)."""
        return state.workload.next(sender.traffic.sizer(keys if stream == PAIR_STREAM else [stream]))

    loop = OpenLoop(
        list(config.models),
        pool,
        next_plan,
        send,
        pair if state.paired is not None else None,
        state.arrivals,
        config.seed,
    )
    loop.burstiness = state.options.burstiness
    loop.backoffs = backoffs
    loop.stopped = sender.giveup.is_stopped
    loop.on_dropped = lambda key, profile, stage: state.recorder.count(
        key, profile or state.workload.profiles[0].name, stage, "dropped"
    )
    replay = state.options.shape.replay if state.options.shape is not None else None
    if replay is not None and is_session_trace(replay.path):
        first = config.models[0]
        sessions = SessionReplay(replay, keys, lambda: state.run_salt, sender.traffic.tokens[first.key])
        targets = {m.key: m for m in config.models}

        def play(stream: str, intended: float, stage: int) -> None:
            def step(key: str, plan: PlannedRequest, due: float, session: str) -> RequestRecord:
                client = pool.acquire(key)
                try:
                    return send_plan(
                        environment, sender, client, targets[key], plan, stage, due, Who(conversation=session)
                    )
                finally:
                    pool.release(key, client)

            sessions.play(stream, intended, step)

        loop.planned = sessions.schedule  # type: ignore[assignment]
        loop.arrival = play
    elif replay is not None:
        first = config.models[0]
        loop.planned = ReplaySchedule(
            replay, keys, state.paired is not None, lambda: state.run_salt, sender.traffic.tokens[first.key]
        )
    elif sender.traffic.conversational:
        loop.arrival = lambda stream, intended, stage: converse_open(environment, sender, pool, stream, intended, stage)
    return loop
