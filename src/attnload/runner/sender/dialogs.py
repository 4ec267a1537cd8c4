"""Conversations and dataset prompts at run time: what a sender says next, turn by turn.

The state machines live in ``workload.conversation``; this module binds them to a run. A
sender (a closed-loop user, or one open-loop arrival) holds a :class:`Session`: at most one
conversation at a time, kept per model because each model's replies differ. In paired mode
every model gets the same script (same salt, same user messages, same ``max_tokens``), each
with its own history, and turn *k* goes to all models together; the conversation ends for
all as soon as one model's ends (a failure or its context window), so pairs always compare
the same turn of the same script.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gevent

from attnload.config.model import ModelTarget, Profile, TestConfig, sample_count, sample_seconds
from attnload.measure.recorder import RequestRecord
from attnload.measure.tokens import MESSAGE_OVERHEAD_TOKENS
from attnload.plan.traffic import open_datasets
from attnload.workload.agent import AgentConversation, agent_script, child_spec, tool_definitions
from attnload.workload.calibration import Calibrations
from attnload.workload.conversation import (
    Conversation,
    ConversationScript,
    dataset_script,
    new_salt,
    synthetic_script,
)
from attnload.workload.dataset import DatasetSampler
from attnload.workload.prompts import PlannedRequest, Workload
from attnload.workload.tokenizer import EstimatorTokens, TextTokens, load_tokenizer


@dataclass(frozen=True)
class Step:
    """What a sender does next: wait ``think_s`` (from the end of the previous answer), then send ``plans``."""

    plans: dict[str, PlannedRequest]
    think_s: float = 0.0


class Traffic:
    """Per process: the workload, the opened datasets (samplers sharded by worker) and each model's tokenizer."""

    def __init__(self, config: TestConfig, workload: Workload, shard: Callable[[], tuple[int, int]]) -> None:
        self.config = config
        self.workload = workload
        self.datasets = open_datasets(config, workload.profiles)
        self.tokens: dict[str, TextTokens] = {m.key: load_tokenizer(m.tokenizer) for m in config.models}
        self.calibration = Calibrations()
        """Models without a tokenizer: prompt sizes learned from the server's usage (``workload.calibration``)."""
        self.targets: dict[str, ModelTarget] = {m.key: m for m in config.models}
        self.rng = random.Random(f"attnload.traffic:{config.seed}")
        self._shard = shard
        self._samplers: dict[str, tuple[tuple[int, int], DatasetSampler]] = {}
        self._tools: dict[str, list[dict[str, Any]]] = {}
        self.session_ended: Callable[[str, SessionTally], None] | None = None
        """Told each model's tally when an agent session ends (the sender files it with the context recorder)."""

    @property
    def conversational(self) -> bool:
        return any(p.conversational for p in self.workload.profiles)

    def sampler(self, profile: str) -> DatasetSampler:
        """This worker's sampler of ``profile``'s dataset; rebuilt if the fleet's size changed."""
        shard = self._shard()
        index, count = shard[0] % max(shard[1], 1), max(shard[1], 1)
        held = self._samplers.get(profile)
        if held is None or held[0] != (index, count):
            held = (index, count), DatasetSampler(self.datasets[profile], self.config.seed, shard=index, shards=count)
            self._samplers[profile] = held
        return held[1]

    def tools(self, profile: Profile, tokens: TextTokens) -> list[dict[str, Any]]:
        """The agent profile's tool definitions, built once per process (every session sends the same)."""
        assert profile.agent is not None
        if profile.name not in self._tools:
            self._tools[profile.name] = tool_definitions(profile.agent.tools, tokens)
        return self._tools[profile.name]

    def script(self, profile: Profile, salt: str, tokens: TextTokens) -> ConversationScript:
        if profile.dataset is not None:
            record = self.sampler(profile.name).next()
            return dataset_script(
                record, salt, self.rng, turns=profile.dataset.turns, output_tokens=profile.dataset.output_tokens
            )
        assert profile.conversation is not None
        return synthetic_script(profile.conversation, salt, self.rng, tokens)

    def counter(self, key: str) -> Callable[[Sequence[Mapping[str, object]]], int] | None:
        """A prompt counter by the model's tokenizer (None: the estimator, the Conversation's default)."""
        tokens = self.tokens[key]
        if isinstance(tokens, EstimatorTokens):
            return None
        return lambda messages: sum(tokens.count(str(m.get("content", ""))) + MESSAGE_OVERHEAD_TOKENS for m in messages)

    def sizer(self, keys: Sequence[str]) -> TextTokens | None:
        """What sizes a single-turn prompt for ``keys``: the first model's tokenizer, else its calibration
        once learned (None: the estimator).

        Paired mode sends one text to every model, so it is sized by the first model's tokenizer and
        the others count it by theirs (their tokenizer's difference), as conversations and replay do.
        """
        tokens = self.tokens.get(keys[0]) if keys else None
        if tokens is not None and isinstance(tokens, EstimatorTokens):
            return self.calibration.sizer(keys[0])
        return tokens

    def learn(self, target: ModelTarget, plan: PlannedRequest, record: RequestRecord) -> None:
        """A model without a tokenizer learns its prompt sizes from an answer's ``usage.prompt_tokens``.

        Single-message prompts only: they are the ones sized (a conversation's history is not).
        """
        if target.tokenizer is None and record.outcome == "ok" and not record.tokens_estimated:
            if len(plan.messages) == 1:
                self.calibration.observe(target.key, plan.messages, record.prompt_tokens)

    def session(self, keys: Sequence[str]) -> Session:
        return Session(self, list(keys))


class Session:
    """One sender's traffic for ``keys`` (one model, or every model when paired)."""

    def __init__(self, traffic: Traffic, keys: list[str]) -> None:
        self.traffic = traffic
        self.keys = keys
        self.profile: Profile | None = None
        self.dialog: dict[str, Conversation | AgentConversation] | None = None
        self.conversations = 0
        self.tallies: dict[str, SessionTally] = {}
        """Agent sessions: what each model's session did so far (filed when it ends)."""
        self.fanned_out = False

    def next(self) -> Step:
        """The next request(s): the current conversation's next turn, else a new conversation or request."""
        if self.dialog is not None:
            plans = self._turn()
            if plans is not None:
                profile = self.profile
                think: Any = 0.0
                if self.fanned_out:  # the sub-agents were the tool: it has run
                    self.fanned_out = False
                elif profile is not None and profile.agent is not None:
                    think = profile.agent.tool_time_s  # the tool runs between an answer and the next step
                elif profile is not None and profile.conversation is not None:
                    think = profile.conversation.think_time_s
                return Step(plans, sample_seconds(think, self.traffic.rng))
            self.close()
        workload = self.traffic.workload
        profile = workload.choose()
        if not profile.conversational:
            plan = workload.plan(profile, self.traffic.sizer(self.keys))
            return Step(dict.fromkeys(self.keys, plan))
        self._open(profile)
        plans = self._turn()
        assert plans is not None  # turn 1 always goes
        return Step(plans)

    def continues(self) -> bool:
        """Whether the current conversation has another turn for every model."""
        return self.dialog is not None and all(c.peek() is not None for c in self.dialog.values())

    def replied(self, records: Mapping[str, RequestRecord | object]) -> None:
        """Feed each model's answer back: the streamed text extends its history; a failure ends the conversation."""
        if self.dialog is None:
            return
        for key, conversation in self.dialog.items():
            record = records.get(key)
            tally = self.tallies.get(key)
            if isinstance(record, RequestRecord) and record.outcome == "ok" and record.reply_text is not None:
                conversation.record_reply(record.reply_text)
                if tally is not None:
                    tally.add(record)
            else:
                conversation.fail()
            if tally is not None:
                tally.ended_perf = time.perf_counter()

    def run_children(self, send: Callable[[str, PlannedRequest], RequestRecord]) -> None:
        """``sub_agents``: the step just answered fanned out; run its child sessions at once (each its steps in
        order, tool time between), then hand their final answers back as the step's tool results."""
        dialog, profile = self.dialog, self.profile
        if dialog is None or profile is None or profile.agent is None or profile.agent.sub_agents is None:
            return
        agent, traffic = profile.agent, self.traffic
        jobs: list[tuple[str, AgentConversation]] = []
        for key, conversation in dialog.items():
            if isinstance(conversation, AgentConversation) and conversation.children_pending:
                for _ in range(conversation.children_pending):
                    tokens = traffic.tokens[key]
                    script = agent_script(
                        child_spec(agent), new_salt(), traffic.rng, tokens, traffic.tools(profile, tokens)
                    )
                    jobs.append((key, AgentConversation(script, default_max_tokens=conversation.default_max_tokens)))
        if not jobs:
            return
        answers = [gevent.spawn(self._child, key, child, send) for key, child in jobs]
        try:
            gevent.joinall(answers)
        finally:  # the parent stopped (the test ended): its children stop with it
            gevent.killall(answers, block=False)
        for key, conversation in dialog.items():
            if isinstance(conversation, AgentConversation) and conversation.children_pending:
                conversation.children_done(
                    [str(g.value or "") for (k, _), g in zip(jobs, answers, strict=True) if k == key]
                )
        self.fanned_out = True

    def _child(self, key: str, child: AgentConversation, send: Callable[[str, PlannedRequest], RequestRecord]) -> str:
        """One sub-agent's steps; its last answer (empty when a step failed)."""
        profile = self.profile
        assert profile is not None and profile.agent is not None
        workload, answer = self.traffic.workload, ""
        while (taken := child.next_request()) is not None:
            if child.turn > 1:
                gevent.sleep(sample_seconds(profile.agent.tool_time_s, self.traffic.rng))
            drawn = sample_count(profile.max_tokens, workload.rng) if profile.max_tokens is not None else None
            plan = PlannedRequest(
                profile=profile.name,
                messages=taken[0],
                max_tokens=drawn or workload.default_max_tokens,
                ignore_eos=workload.default_ignore_eos if profile.ignore_eos is None else profile.ignore_eos,
                tools=child.script.tools,
                tool_choice=child.script.tool_choice,
            )
            record = send(key, plan)
            if record.outcome != "ok" or record.reply_text is None:
                child.fail()
                return ""
            answer = record.reply_text
            child.record_reply(answer)
        return answer

    def close(self) -> None:
        """The current conversation is over: each agent session's tally goes to the sender, once."""
        dialog, self.dialog = self.dialog, None
        ended = self.traffic.session_ended
        if dialog is not None and ended is not None:
            for key, tally in self.tallies.items():
                conversation = dialog.get(key)
                if isinstance(conversation, AgentConversation):
                    if conversation.ended is None:
                        conversation.peek()  # settles why it ended (steps or context)
                    tally.ended = conversation.ended or "steps"
                    ended(key, tally)
        self.tallies = {}

    def _open(self, profile: Profile) -> None:
        traffic = self.traffic
        first = self.keys[0]
        default_max = profile.max_tokens if isinstance(profile.max_tokens, int) else traffic.config.request.max_tokens
        self.profile = profile
        self.dialog = {}
        self.conversations += 1
        if profile.agent is not None:
            tokens = traffic.tokens[first]
            agent = agent_script(profile.agent, new_salt(), traffic.rng, tokens, traffic.tools(profile, tokens))
            for key in self.keys:
                counter = traffic.counter(key)
                extra = {"count_prompt": counter} if counter is not None else {}
                self.dialog[key] = AgentConversation(
                    agent,
                    context_window_tokens=traffic.targets[key].max_context,
                    default_max_tokens=default_max,
                    **extra,
                )
                self.tallies[key] = SessionTally(started_perf=time.perf_counter())
            return
        script = traffic.script(profile, new_salt(), traffic.tokens[first])
        for key in self.keys:
            counter = traffic.counter(key)
            extra = {"count_prompt": counter} if counter is not None else {}
            self.dialog[key] = Conversation(
                script, context_window_tokens=traffic.targets[key].max_context, default_max_tokens=default_max, **extra
            )

    def _turn(self) -> dict[str, PlannedRequest] | None:
        dialog, profile = self.dialog, self.profile
        assert dialog is not None and profile is not None
        if not all(c.peek() is not None for c in dialog.values()):
            return None
        workload = self.traffic.workload
        drawn = sample_count(profile.max_tokens, workload.rng) if profile.max_tokens is not None else None
        ignore_eos = workload.default_ignore_eos if profile.ignore_eos is None else profile.ignore_eos
        plans = {}
        for key, conversation in dialog.items():
            taken = conversation.next_request()
            assert taken is not None
            messages, max_tokens, _tokens = taken
            agent = conversation.script if isinstance(conversation, AgentConversation) else None
            plans[key] = PlannedRequest(
                profile=profile.name,
                messages=messages,
                max_tokens=max_tokens or drawn or workload.default_max_tokens,
                ignore_eos=ignore_eos,
                turn=None if agent is not None else conversation.turn,
                step=conversation.turn if agent is not None else None,
                tools=agent.tools if agent is not None else None,
                tool_choice=agent.tool_choice if agent is not None else None,
            )
        return plans


@dataclass
class SessionTally:
    """What one model's agent session did: steps answered, tokens in and out, when it began and ended."""

    started_perf: float
    ended_perf: float = 0.0
    steps: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ended: str = "steps"

    def add(self, record: RequestRecord) -> None:
        self.steps += 1
        self.prompt_tokens += record.prompt_tokens
        self.completion_tokens += record.completion_tokens

    @property
    def duration_s(self) -> float:
        return max(0.0, self.ended_perf - self.started_perf)


def with_reply_tokens(
    record: RequestRecord, tokens: TextTokens, messages: Sequence[Mapping[str, object]]
) -> RequestRecord:
    """A server sent no usage: count prompt and completion with the model's tokenizer instead of the estimator."""
    if not record.tokens_estimated or isinstance(tokens, EstimatorTokens):
        return record
    prompt = sum(tokens.count(str(m.get("content", ""))) + MESSAGE_OVERHEAD_TOKENS for m in messages)
    completion = tokens.count(record.reply_text) if record.reply_text is not None else record.completion_tokens
    return replace(record, prompt_tokens=prompt, completion_tokens=completion)
