"""Conversations: history grows by exactly the streamed reply, turn limits, context rollover, think time."""

from __future__ import annotations

import itertools
import json
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnload.config.model import ConversationSpec, DurationDistribution, sample_seconds
from attnload.measure.tokens import prompt_tokens
from attnload.workload.conversation import (
    Conversation,
    ConversationScript,
    EndReason,
    PromptCounter,
    dataset_script,
    new_salt,
    synthetic_script,
)
from attnload.workload.dataset import open_dataset

SALT = "[00000000deadbeef] "


@dataclass(frozen=True)
class TurnRequest:
    """One request of a conversation, as ``ConversationUser`` hands it out."""

    messages: list[dict[str, str]]
    max_tokens: int | None
    turn: int
    """1-based turn index within its conversation (the results' ``turns[]`` key)."""
    conversation: int
    """0-based count of this user's conversations."""
    prompt_tokens: int


class ConversationUser:
    """Drives :class:`Conversation` as a sender does: one user's conversations, one at a time; a new one
    (new salt, new script) when one ends, think time drawn between turns."""

    def __init__(
        self,
        script_factory: Callable[[str], ConversationScript],
        *,
        think_time_s: float | DurationDistribution = 0.0,
        rng: random.Random | None = None,
        context_window_tokens: int | None = None,
        default_max_tokens: int = 0,
        count_prompt: PromptCounter = prompt_tokens,
        salt_factory: Callable[[], str] = new_salt,
    ) -> None:
        self.script_factory = script_factory
        self.think_time = think_time_s
        self.rng = rng or random.Random()
        self.context_window_tokens = context_window_tokens
        self.default_max_tokens = default_max_tokens
        self.count_prompt = count_prompt
        self.salt_factory = salt_factory
        self.conversations = 0
        self.current: Conversation | None = None
        self.ended: list[EndReason] = []
        """Why each finished conversation ended, in order (results may count context rollovers)."""

    def next_request(self) -> TurnRequest:
        if self.current is not None:
            taken = self.current.next_request()
            if taken is not None:
                return TurnRequest(taken[0], taken[1], self.current.turn, self.conversations - 1, taken[2])
            self._close()
        self.current = Conversation(
            self.script_factory(self.salt_factory()),
            context_window_tokens=self.context_window_tokens,
            default_max_tokens=self.default_max_tokens,
            count_prompt=self.count_prompt,
        )
        self.conversations += 1
        first = self.current.next_request()
        assert first is not None  # turn 1 always goes
        return TurnRequest(first[0], first[1], 1, self.conversations - 1, first[2])

    def record_reply(self, text: str) -> None:
        assert self.current is not None
        self.current.record_reply(text)

    def fail(self) -> None:
        if self.current is not None:
            self.current.fail()

    def next_delay_s(self) -> float:
        """Think time before the next request: drawn if the conversation goes on, 0 before a new one."""
        if self.current is None or self.current.peek() is None:
            return 0.0
        return sample_seconds(self.think_time, self.rng)

    def _close(self) -> None:
        if self.current is not None and self.current.ended is not None:
            self.ended.append(self.current.ended)
        self.current = None


def fixed_salt_factory() -> tuple[list[str], Callable[[], str]]:
    made: list[str] = []
    counter = itertools.count()

    def factory() -> str:
        made.append(f"[{next(counter):016x}] ")
        return made[-1]

    return made, factory


def test_request_k_is_request_k_minus_1_plus_streamed_reply_plus_one_user_message() -> None:
    spec = ConversationSpec(turns=4, user_tokens=50)
    made, factory = fixed_salt_factory()
    user = ConversationUser(lambda salt: synthetic_script(spec, salt, random.Random(1)), salt_factory=factory)
    replies = ["Sure! ", "  spaced  reply with trailing newline\n", "ünïcode ✓"]
    previous = user.next_request()
    assert (previous.turn, previous.conversation, len(previous.messages)) == (1, 0, 1)
    assert previous.messages[0]["content"].startswith(made[0])
    for k, reply in enumerate(replies, start=2):
        user.record_reply(reply)
        request = user.next_request()
        assert request.turn == k and request.conversation == 0
        assert request.messages[:-1] == [*previous.messages, {"role": "assistant", "content": reply}]
        assert request.messages[-1]["role"] == "user" and len(request.messages) == 2 * k - 1
        assert request.prompt_tokens == prompt_tokens(request.messages)
        previous = request
    user.record_reply("last")
    fresh = user.next_request()  # 4 turns done: a new conversation with a new salt
    assert (fresh.turn, fresh.conversation, len(fresh.messages)) == (1, 1, 1)
    assert fresh.messages[0]["content"].startswith(made[1]) and made[0] != made[1]
    assert user.ended == ["turns"]


def test_user_messages_have_user_tokens_exactly_salt_included() -> None:
    spec = ConversationSpec(turns=3, user_tokens=120)
    script = synthetic_script(spec, SALT, random.Random(3))
    assert len(script.user_messages) == 3
    assert script.user_messages[0].startswith(SALT) and not script.user_messages[1].startswith(SALT)
    for text in script.user_messages:
        assert prompt_tokens([{"role": "user", "content": text}]) == 120
    # distinct texts per turn, deterministic per seed
    assert len(set(script.user_messages)) == 3
    assert synthetic_script(spec, SALT, random.Random(3)) == script


def test_turns_from_a_distribution_vary_per_conversation() -> None:
    spec = ConversationSpec.model_validate({"turns": {"dist": "uniform", "min": 2, "max": 5}, "user_tokens": 20})
    rng = random.Random(9)
    counts = {len(synthetic_script(spec, SALT, rng).user_messages) for _ in range(60)}
    assert counts == {2, 3, 4, 5}


def test_context_window_rolls_over_to_a_new_conversation() -> None:
    spec = ConversationSpec(turns=50, user_tokens=100)
    rng = random.Random(0)
    user = ConversationUser(
        lambda salt: synthetic_script(spec, salt, rng),
        context_window_tokens=1000,
        default_max_tokens=100,
        salt_factory=lambda: SALT,
    )
    reply = "x" * 396  # 99 + 4 tokens with the message overhead
    turns = []
    for _ in range(10):
        request = user.next_request()
        assert request.prompt_tokens + 100 <= 1000 or request.turn == 1
        turns.append(request.turn)
        user.record_reply(reply)
    # each turn adds 100 (user) + 103 (assistant): turn 5 would be 100 + 4 * 203 = 912 + 100 > 1000
    assert turns == [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    assert user.ended == ["context", "context"]


def test_first_turn_goes_even_if_too_long_for_the_window() -> None:
    script = ConversationScript(("x" * 4000, "next"))
    conversation = Conversation(script, context_window_tokens=100)
    taken = conversation.next_request()
    assert taken is not None and taken[2] == 1004
    conversation.record_reply("r")
    assert conversation.next_request() is None and conversation.ended == "context"


def test_protocol_misuse_and_failure() -> None:
    conversation = Conversation(ConversationScript(("a", "b", "c")))
    with pytest.raises(RuntimeError):
        conversation.record_reply("no request yet")
    assert conversation.next_request() is not None
    with pytest.raises(RuntimeError):
        conversation.next_request()
    conversation.fail()
    assert conversation.next_request() is None and conversation.ended == "failed"


def test_failed_turn_starts_a_new_conversation() -> None:
    user = ConversationUser(lambda salt: ConversationScript((salt + "a", "b")), salt_factory=lambda: SALT)
    assert user.next_request().turn == 1
    user.fail()
    request = user.next_request()
    assert (request.turn, request.conversation, user.ended) == (1, 1, ["failed"])


def test_dataset_conversation_replays_human_turns_with_recorded_lengths(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    lines = [
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "r" * 80},
                {"role": "user", "content": "q2"},
                {"role": "assistant", "content": "s" * 8},
            ]
        },
        {"prompt": "only"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    rng = random.Random(0)
    with open_dataset(path) as data:
        script = dataset_script(data.record(0), SALT, rng, turns="all")
        assert script == ConversationScript(("q1", "q2"), (20, 2), SALT + "be brief")
        assert dataset_script(data.record(0), SALT, rng).user_messages == ("q1",)
        plain = dataset_script(data.record(1), SALT, rng, output_tokens=33)
        assert plain == ConversationScript((SALT + "only",), (33,), None)
        user = ConversationUser(
            lambda salt: dataset_script(data.record(0), salt, rng, turns="all"),
            salt_factory=lambda: SALT,
            default_max_tokens=256,
        )
        first = user.next_request()
        assert first.messages == [{"role": "system", "content": SALT + "be brief"}, {"role": "user", "content": "q1"}]
        assert first.max_tokens == 20
        user.record_reply("streamed answer")
        second = user.next_request()
        assert second.messages == [
            *first.messages,
            {"role": "assistant", "content": "streamed answer"},
            {"role": "user", "content": "q2"},
        ]
        assert second.max_tokens == 2


def test_think_time_is_drawn_between_turns_and_zero_before_a_new_conversation() -> None:
    think = DurationDistribution(dist="uniform", min=0.5, max=1.5)
    user = ConversationUser(
        lambda salt: ConversationScript((salt + "a", "b")),
        think_time_s=think,
        rng=random.Random(4),
        salt_factory=lambda: SALT,
    )
    assert user.next_delay_s() == 0.0  # nothing started yet
    user.next_request()
    user.record_reply("r")
    delays = []
    for _ in range(200):
        delays.append(user.next_delay_s())
    assert all(0.5 <= d <= 1.5 for d in delays) and 0.9 < statistics.mean(delays) < 1.1
    user.next_request()
    user.record_reply("r")
    assert user.next_delay_s() == 0.0  # both turns used: the next request opens a new conversation
    fixed = ConversationUser(lambda salt: ConversationScript(("a", "b")), think_time_s=2.5, salt_factory=lambda: SALT)
    fixed.next_request()
    fixed.record_reply("r")
    assert fixed.next_delay_s() == 2.5


@pytest.mark.parametrize(
    ("dist", "mean"),
    [
        ({"dist": "fixed", "value": 0.25}, 0.25),
        ({"dist": "exponential", "mean": 2.0}, 2.0),
        ({"dist": "lognormal", "mean": 1.0, "stddev": 0.5}, 1.0),
        ({"dist": "normal", "mean": 3.0, "stddev": 0.2}, 3.0),
    ],
)
def test_duration_distributions_have_their_mean(dist: dict[str, object], mean: float) -> None:
    model = DurationDistribution.model_validate(dist)
    rng = random.Random(11)
    draws = [model.sample(rng) for _ in range(4000)]
    assert min(draws) >= 0.0
    assert statistics.mean(draws) == pytest.approx(mean, rel=0.06)


def test_spec_validation() -> None:
    spec = ConversationSpec.model_validate({"turns": 3, "think_time_s": {"dist": "exponential", "mean": 1.5}})
    assert spec.user_tokens is None and isinstance(spec.think_time_s, DurationDistribution)
    for bad, needle in [
        ({"turns": 0}, "at least 1"),
        ({"turns": 2, "think_time_s": -1}, "greater than or equal"),
        ({"turns": 2, "think_time_s": {"dist": "normal", "mean": 1}}, "needs stddev"),
        ({"turns": 2, "turn": 3}, "extra"),
    ]:
        with pytest.raises(ValueError, match=needle):
            ConversationSpec.model_validate(bad)
    with pytest.raises(ValueError, match="needs conversation.user_tokens"):
        synthetic_script(spec, SALT, random.Random(0))


def test_new_salt_has_the_prompt_builder_format_and_is_random() -> None:
    one, two = new_salt(), new_salt()
    assert len(one) == 19 and one[0] == "[" and one.endswith("] ") and one != two
