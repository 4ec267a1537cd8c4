"""Load shapes: ``concurrency:1,8,64`` (closed-loop users per stage), ``rate:0.5,1`` (open loop),
``context:1k,16k`` (a context ladder: one prompt length per stage, optionally times a ``--users`` list),
``interference:16k`` (decode users while long prompts are injected among them), ``decode:1k-32k`` and
``capacity:8k`` (the attention microscope's decode sweep and KV capacity probe) and ``sweep`` (an adaptive
capacity study, planned stage by stage in ``sweep.py``).

A shape is parsed once into :class:`ShapeSpec` (bad specs are one-line usage errors);
``stage_at(elapsed_s)`` says which stage a moment belongs to. Each kind is one class that carries its
behaviour: its texts (``usage``, ``flag_help``), what it checks of a run (``check_run``, ``with_users``,
``with_speed``), whether it sizes its own prompts (``sizes_prompts``), whether its stages are planned live
(``planned_live``) and what it replays (``replay``); the planner, the runner and the progress line ask the
spec, never its class. Adding a kind is one class here and one entry in :data:`SHAPE_KINDS`. No Locust
import here (its ``LoadTestShape`` adapter is ``runner/shape.py``), so tests call this module directly.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import ClassVar, Self

from attnload.config.limits import MAX_DURATION_S, MAX_PROMPT_TOKENS, MAX_RATE, MAX_USERS
from attnload.config.model import Profile, TestConfig
from attnload.errors import UsageError
from attnload.workload.ladder import check_decode, check_ladder, parse_tokens, parse_users_list
from attnload.workload.sessiontrace import is_session_trace, load_sessions
from attnload.workload.trace import load_trace

_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m(?!s))?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$")


def parse_duration(text: str | float | int, what: str = "duration") -> float:
    """Seconds from ``90``, ``90s``, ``1m30s`` or ``2h``; a bad value is a usage error."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        match = _DURATION.match(str(text))
        if not match or not any(match.groups()):
            raise UsageError(f"{what} {text!r} is not a duration: use e.g. 60s, 2m or 1m30s")
        hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    if not math.isfinite(seconds) or seconds <= 0:
        raise UsageError(f"{what} must be a positive, finite duration, got {text!r}")
    if seconds > MAX_DURATION_S:
        raise UsageError(
            f"{what} {text!r} is longer than the limit of {MAX_DURATION_S / 86400:g} days: "
            "split the test into several runs"
        )
    return seconds


@dataclass(frozen=True)
class Stage:
    index: int
    start_s: float
    end_s: float
    users: int | None = None
    rate: float | None = None
    context: int | None = None
    """A context ladder's rung: every prompt of the stage has this many tokens (None: the profiles decide)."""
    decode: tuple[int, int] | None = None
    """A decode sweep's (prompt tokens, tokens reached at the answer's end); None for other shapes."""


SWEEP_DEFAULT_MAX_USERS = 256
"""Per model: the sweep's doubling probe stops here at the latest (2^8, so ≤ 9 probe stages)."""


@dataclass(frozen=True)
class StagedSpec:
    """What every shape kind has: equal-length stages at ``levels``; ``kind`` tags the union."""

    kind: ClassVar[str]
    usage: ClassVar[str]
    """How the unknown-shape error names this kind (e.g. ``rate:0.5,1,2 (req/s per model)``)."""
    flag_help: ClassVar[str]
    """How ``--shape``'s help names this kind."""
    open_loop: ClassVar[bool] = False
    takes_burstiness: ClassVar[bool] = False
    """Its stages schedule open-loop arrivals whose law ``--burstiness`` sets."""
    planned_live: ClassVar[bool] = False
    """Its stages are decided during the run (no fixed ``stages``, no planned duration)."""
    sizes_prompts: ClassVar[bool] = False
    """It sets every prompt's length itself, so a profile needs no ``prompt``/``prompt_tokens``."""
    lockstep: ClassVar[bool] = False
    """Every user of a stage sends one request at once (no start spread); the stage ends when all are answered."""
    stretches: ClassVar[bool] = False
    """Its stages may run longer than planned when TTFT is a sizable share of them (``--ladder-stretch``)."""
    levels: tuple[float, ...]
    stage_duration_s: float

    @property
    def injected_prefill_tokens(self) -> int | None:
        """The prompt length one extra sender per model injects among the decoders (None: it injects none)."""
        return None

    @property
    def fixed_context(self) -> int | None:
        """The prompt tokens of every stage of a shape planned live at one context (a capacity probe)."""
        return None

    @property
    def replay(self) -> ReplaySpec | None:
        """The trace this shape replays (None: it replays none; its requests come from the profiles)."""
        return None

    @property
    def replay_speed(self) -> float | None:
        """The speed-up handed to every process with the shape (None: not a replay)."""
        return None

    def check_run(self, config: TestConfig, profiles: list[Profile], paired: bool) -> None:
        """Refuse, before any load, a run this shape cannot make of ``config`` (a one-line usage error)."""

    def with_users(self, users: tuple[int, ...]) -> Self:
        """This shape at ``--users``: only a shape without a user count of its own takes one."""
        raise UsageError("--users and --shape both set the user count: pass one of them")

    def with_speed(self, speed: float) -> Self:
        """This shape at ``--replay-speed``: only a replay takes one."""
        raise UsageError("--replay-speed applies to --shape replay:PATH only")

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The fixed stages (none for a sweep, whose stages depend on what it measures)."""
        return ()

    @property
    def peak_users(self) -> int:
        """Closed-loop users of the busiest stage (0 for open-loop and planned-live shapes)."""
        return 0

    @property
    def duration_s(self) -> float:
        return self.stage_duration_s * len(self.levels)

    def stage_at(self, elapsed_s: float) -> Stage | None:
        index = int(elapsed_s // self.stage_duration_s)
        stages = self.stages
        return stages[index] if 0 <= index < len(stages) else None

    def to_text(self) -> str:
        return f"{self.kind}:{','.join(f'{v:g}' for v in self.levels)}"

    @classmethod
    def parse(cls, text: str, values: str, stage_duration_s: float) -> Self:
        """The spec of ``kind:v1,v2,...`` (``values`` is what follows the colon)."""
        parts = [p.strip() for p in values.split(",") if p.strip()]
        if not parts:
            raise UsageError(f"shape {text!r} lists no levels: e.g. {cls.kind}:1,8,64")
        levels: list[float] = []
        for part in parts:
            try:
                value = float(part)
            except ValueError:
                raise UsageError(f"shape {text!r}: {part!r} is not a number") from None
            if not cls.valid_level(value):
                raise UsageError(f"shape {text!r}: {part!r} must be {cls.level_meaning}")
            levels.append(value)
        return cls(levels=tuple(levels), stage_duration_s=stage_duration_s)

    level_meaning: ClassVar[str] = "positive"

    @staticmethod
    def valid_level(value: float) -> bool:
        return math.isfinite(value) and value > 0


@dataclass(frozen=True)
class ConcurrencySpec(StagedSpec):
    """``concurrency:1,8,64``: closed-loop users per stage."""

    kind: ClassVar[str] = "concurrency"
    usage: ClassVar[str] = "concurrency:1,8,64 (users)"
    flag_help: ClassVar[str] = "concurrency:1,8,64 (users per stage)"
    level_meaning: ClassVar[str] = f"a whole number of users from 1 to {MAX_USERS:,}"

    @property
    def stages(self) -> tuple[Stage, ...]:
        d = self.stage_duration_s
        return tuple(Stage(i, i * d, (i + 1) * d, users=int(v)) for i, v in enumerate(self.levels))

    @property
    def peak_users(self) -> int:
        return max(int(v) for v in self.levels)

    @staticmethod
    def valid_level(value: float) -> bool:  # inf would crash int(); a huge count would exhaust memory
        return math.isfinite(value) and 0 < value <= MAX_USERS and value == int(value)


@dataclass(frozen=True)
class RateSpec(StagedSpec):
    """``rate:0.5,1,2``: open-loop arrivals per stage (req/s per model)."""

    kind: ClassVar[str] = "rate"
    usage: ClassVar[str] = "rate:0.5,1,2 (req/s per model)"
    flag_help: ClassVar[str] = usage
    open_loop: ClassVar[bool] = True
    takes_burstiness: ClassVar[bool] = True
    level_meaning: ClassVar[str] = f"a finite rate in req/s above 0 and at most {MAX_RATE:,.0f}"

    @staticmethod
    def valid_level(value: float) -> bool:  # inf/nan crashed the scheduler after the run had started
        return math.isfinite(value) and 0 < value <= MAX_RATE

    @property
    def stages(self) -> tuple[Stage, ...]:
        d = self.stage_duration_s
        return tuple(Stage(i, i * d, (i + 1) * d, rate=v) for i, v in enumerate(self.levels))


@dataclass(frozen=True)
class SweepSpec(StagedSpec):
    """``sweep`` or ``sweep:MAX``: an adaptive capacity study planned live; ``levels`` holds one value,
    the per-model user cap of the probe (a power of two is natural)."""

    kind: ClassVar[str] = "sweep"
    usage: ClassVar[str] = "sweep"
    flag_help: ClassVar[str] = "sweep[:CAP]"
    takes_burstiness: ClassVar[bool] = True
    planned_live: ClassVar[bool] = True

    def check_run(self, config: TestConfig, profiles: list[Profile], paired: bool) -> None:
        if paired:
            raise UsageError("--paired cannot run a sweep (each model gets its own rates there): drop one of them")

    @classmethod
    def parse(cls, text: str, values: str, stage_duration_s: float) -> Self:
        value = values.strip()
        if not value:
            return cls(levels=(float(SWEEP_DEFAULT_MAX_USERS),), stage_duration_s=stage_duration_s)
        try:
            cap = int(value)
        except ValueError:
            raise UsageError(
                f"shape {text!r}: sweep takes one whole number, the per-model user cap (e.g. sweep:128)"
            ) from None
        if not 1 <= cap <= MAX_USERS:
            raise UsageError(f"shape {text!r}: the sweep's user cap must be from 1 to {MAX_USERS:,}")
        return cls(levels=(float(cap),), stage_duration_s=stage_duration_s)


REPLAY_LEAD_S = 0.5
"""A replay's first line is due this long after its stage starts: every worker has had the stage
message and built its first prompt by then, so no line is late because the replay just began."""


@dataclass(frozen=True)
class ReplaySpec(StagedSpec):
    """``replay:PATH``: one open-loop stage sending a trace's requests at their own offsets (÷ ``speed``).

    ``levels`` holds the speed. The stage lasts the trace's span at that speed plus a drain
    allowance (``stage_duration_s``, the ``--stage-duration``): the run ends once every
    request has finished, or when the allowance is spent (what is still in flight is then
    cancelled). The trace is read (and checked) when the shape is parsed, so a bad trace
    is a usage error before any load starts.
    """

    kind: ClassVar[str] = "replay"
    usage: ClassVar[str] = "replay:TRACE"
    flag_help: ClassVar[str] = usage
    open_loop: ClassVar[bool] = True
    path: str = ""
    span_s: float = 0.0
    """Offset of the trace's last request at speed 1."""
    requests: int = 0
    arrival_rate_per_s: float = 0.0
    """The trace's own arrival rate at speed 1."""

    @property
    def speed(self) -> float:
        return self.levels[0]

    @property
    def replay(self) -> ReplaySpec:
        return self

    @property
    def replay_speed(self) -> float:
        return self.speed

    @property
    def replay_s(self) -> float:
        """When the last request is due, from the stage start."""
        return REPLAY_LEAD_S + self.span_s / self.speed

    @property
    def duration_s(self) -> float:
        return self.replay_s + self.stage_duration_s

    @property
    def stages(self) -> tuple[Stage, ...]:
        return (Stage(0, 0.0, self.duration_s, rate=self.arrival_rate_per_s * self.speed),)

    def stage_at(self, elapsed_s: float) -> Stage | None:
        return self.stages[0] if 0 <= elapsed_s < self.duration_s else None

    def to_text(self) -> str:
        return f"replay:{self.path}"

    def with_speed(self, speed: float) -> Self:
        if not speed > 0:
            raise UsageError(f"--replay-speed {speed:g}: must be above 0 (2 replays twice as fast)")
        return replace(self, levels=(float(speed),))

    @classmethod
    def parse(cls, text: str, values: str, stage_duration_s: float) -> Self:
        path = values.strip()
        if not path:
            raise UsageError(f"shape {text!r} names no trace: use replay:PATH (a Mooncake .jsonl or Azure .csv)")
        if is_session_trace(path):  # agent sessions: steps follow answers, so the span is a lower bound
            sessions = load_sessions(path)
            steps = sum(len(session.steps) for session in sessions)
            span = max(session.span_s for session in sessions)
            return cls(
                levels=(1.0,),
                stage_duration_s=stage_duration_s,
                path=path,
                span_s=span,
                requests=steps,
                arrival_rate_per_s=(steps - 1) / span if steps > 1 and span > 0 else 0.0,
            )
        trace = load_trace(path)
        return cls(
            levels=(1.0,),
            stage_duration_s=stage_duration_s,
            path=path,
            span_s=trace.duration_s,
            requests=len(trace.requests),
            arrival_rate_per_s=trace.arrival_rate_per_s,
        )


DEFAULT_LADDER_USERS = 8
"""Closed-loop users of a context ladder run without ``--users`` (the run's default)."""
_USERS_SEP = ";users:"
"""How ``to_text`` carries a ladder's ``--users`` list to every Locust process (``ATTNLOAD_SHAPE``)."""


@dataclass(frozen=True)
class ContextSpec(StagedSpec):
    """``context:1k,4k,16k``: a context ladder. Closed loop at the run's users; every request of a stage has a
    prompt of that many tokens and a pinned output. With ``--users 1,8,32`` it is a grid: every (context, users)
    pair is a stage, contexts outer, users inner (``levels`` holds the contexts)."""

    kind: ClassVar[str] = "context"
    usage: ClassVar[str] = "context:1k,16k (prompt tokens)"
    flag_help: ClassVar[str] = "context:1k,16k (prompt tokens per stage; with --users 1,8 a grid)"
    sizes_prompts: ClassVar[bool] = True
    stretches: ClassVar[bool] = True
    users: tuple[int, ...] = (DEFAULT_LADDER_USERS,)

    @property
    def stages(self) -> tuple[Stage, ...]:
        d = self.stage_duration_s
        pairs = [(int(c), u) for c in self.levels for u in self.users]
        return tuple(Stage(i, i * d, (i + 1) * d, users=u, context=c) for i, (c, u) in enumerate(pairs))

    @property
    def peak_users(self) -> int:
        return max(self.users)

    @property
    def duration_s(self) -> float:
        return self.stage_duration_s * len(self.levels) * len(self.users)

    @property
    def contexts(self) -> tuple[int, ...]:
        return tuple(int(c) for c in self.levels)

    def with_users(self, users: tuple[int, ...]) -> Self:
        return replace(self, users=users)

    def check_run(self, config: TestConfig, profiles: list[Profile], paired: bool) -> None:
        check_ladder(config, self.contexts, profiles)

    def to_text(self) -> str:
        return f"context:{','.join(str(c) for c in self.contexts)}{_USERS_SEP}{','.join(map(str, self.users))}"

    @classmethod
    def parse(cls, text: str, values: str, stage_duration_s: float) -> Self:
        lengths, _sep, users_text = values.partition(_USERS_SEP)
        parts = [p.strip() for p in lengths.split(",") if p.strip()]
        if not parts:
            raise UsageError(f"shape {text!r} lists no context lengths: e.g. context:1k,4k,16k")
        contexts: list[float] = []
        for part in parts:
            try:
                tokens = parse_tokens(part)
            except (ValueError, IndexError):
                raise UsageError(f"shape {text!r}: {part!r} is not a token count (e.g. 1024, 1k or 32k)") from None
            if not 1 <= tokens <= MAX_PROMPT_TOKENS:
                raise UsageError(f"shape {text!r}: {part!r} must be from 1 to {MAX_PROMPT_TOKENS:,} prompt tokens")
            contexts.append(float(tokens))
        users = parse_users_list(users_text, f"shape {text!r} users") if users_text.strip() else (DEFAULT_LADDER_USERS,)
        return cls(levels=tuple(contexts), stage_duration_s=stage_duration_s, users=users)


DECODE_PROMPT_TOKENS = 128
"""``interference:L``: the decode users' prompt (short: their own prefill must not be the interference)."""
INJECT_EVERY_S = 5.0
"""``interference:L``: the injector sends its next prompt this long after the previous one (or half of it
after that one's first token, when its prefill took longer)."""
DEFAULT_INTERFERENCE_USERS = 16
"""``interference:L`` without ``--users``: decode users over all models (8 each of the default pair)."""


@dataclass(frozen=True)
class InterferenceSpec(ContextSpec):
    """``interference:16k``: one stage of decode users (short prompts, pinned answers: a one-rung context ladder
    at ``DECODE_PROMPT_TOKENS``) while one extra sender per model injects a prompt of L tokens (answer of one
    token) every ``INJECT_EVERY_S``; ``levels`` holds L (``measure/interference.py`` measures the stall)."""

    kind: ClassVar[str] = "interference"
    usage: ClassVar[str] = "interference:16k (prefills among decodes)"
    flag_help: ClassVar[str] = "interference:16k (a prompt of that many tokens injected among decode users)"
    users: tuple[int, ...] = (DEFAULT_INTERFERENCE_USERS,)

    @property
    def injected_prefill_tokens(self) -> int:
        return int(self.levels[0])

    @property
    def contexts(self) -> tuple[int, ...]:
        return (DECODE_PROMPT_TOKENS,)

    @property
    def stages(self) -> tuple[Stage, ...]:
        d = self.stage_duration_s
        return (Stage(0, 0.0, d, users=self.users[0], context=DECODE_PROMPT_TOKENS),)

    @property
    def duration_s(self) -> float:
        return self.stage_duration_s

    def with_users(self, users: tuple[int, ...]) -> Self:
        if len(users) != 1:
            raise UsageError(f"interference:L runs one stage: give one --users value, not {len(users)}")
        return replace(self, users=users)

    def to_text(self) -> str:
        return f"interference:{self.injected_prefill_tokens}{_USERS_SEP}{self.users[0]}"

    @classmethod
    def parse(cls, text: str, values: str, stage_duration_s: float) -> Self:
        length, _sep, users_text = values.partition(_USERS_SEP)
        try:
            tokens = parse_tokens(length)
        except (ValueError, IndexError):
            raise UsageError(f"shape {text!r}: give the injected prompt's tokens, e.g. interference:16k") from None
        if not 1 <= tokens <= MAX_PROMPT_TOKENS:
            raise UsageError(f"shape {text!r}: the injected prompt must be from 1 to {MAX_PROMPT_TOKENS:,} tokens")
        users = parse_users_list(users_text, f"shape {text!r} users") if users_text.strip() else None
        return cls(
            levels=(float(tokens),),
            stage_duration_s=stage_duration_s,
            users=users[:1] if users else (DEFAULT_INTERFERENCE_USERS,),
        )


@dataclass(frozen=True)
class DecodeSpec(StagedSpec):
    """``decode:1k-32k``: a decode sweep (docs/microscope.md). Every user of a model sends one request at once, a
    prompt of the first length and an answer pinned to reach the second, so the batch decodes in lockstep; the
    stage ends when every answer is in (at most ``stage_duration_s``). ``--users 1,8,32``: one stage per batch."""

    kind: ClassVar[str] = "decode"
    usage: ClassVar[str] = "decode:1k-32k (a decode sweep)"
    flag_help: ClassVar[str] = "decode:1k-32k (one lockstep batch decoding from 1K to 32K; with --users 1,8 one each)"
    sizes_prompts: ClassVar[bool] = True
    lockstep: ClassVar[bool] = True
    users: tuple[int, ...] = (DEFAULT_LADDER_USERS,)

    @property
    def stages(self) -> tuple[Stage, ...]:
        d, span = self.stage_duration_s, (int(self.levels[0]), int(self.levels[1]))
        return tuple(Stage(i, i * d, (i + 1) * d, users=u, decode=span) for i, u in enumerate(self.users))

    @property
    def peak_users(self) -> int:
        return max(self.users)

    @property
    def duration_s(self) -> float:
        return self.stage_duration_s * len(self.users)

    def with_users(self, users: tuple[int, ...]) -> Self:
        return replace(self, users=users)

    def check_run(self, config: TestConfig, profiles: list[Profile], paired: bool) -> None:
        check_decode(config, int(self.levels[0]), int(self.levels[1]), profiles)

    def to_text(self) -> str:
        return f"decode:{int(self.levels[0])}-{int(self.levels[1])}{_USERS_SEP}{','.join(map(str, self.users))}"

    @classmethod
    def parse(cls, text: str, values: str, stage_duration_s: float) -> Self:
        span, _sep, users_text = values.partition(_USERS_SEP)
        first, dash, last = span.partition("-")
        try:
            start, end = parse_tokens(first), parse_tokens(last)
        except (ValueError, IndexError):
            raise UsageError(f"shape {text!r}: use decode:START-END in tokens, e.g. decode:1k-32k") from None
        if not dash or not 1 <= start < end <= MAX_PROMPT_TOKENS:
            raise UsageError(f"shape {text!r}: START-END must rise, 1 to {MAX_PROMPT_TOKENS:,} tokens: decode:1k-32k")
        users = parse_users_list(users_text, f"shape {text!r} users") if users_text.strip() else (DEFAULT_LADDER_USERS,)
        return cls(levels=(float(start), float(end)), stage_duration_s=stage_duration_s, users=users)


CAPACITY_MAX_USERS, CAPACITY_MAX_STAGES = 256, 13
"""Per model, the capacity probe doubles users up to 256 (9 stages) and bisects 4 times: 13 stages at most."""


@dataclass(frozen=True)
class CapacitySpec(StagedSpec):
    """``capacity:8k``: a KV capacity probe (docs/microscope.md). Closed-loop stages at one prompt length (output
    pinned), users per model doubling from 1 and then bisecting until each model's knee; planned live
    (``runner/shape.py``, ``results/microscope/capacity.py``). ``levels`` holds the context."""

    kind: ClassVar[str] = "capacity"
    usage: ClassVar[str] = "capacity:8k (a KV capacity probe)"
    flag_help: ClassVar[str] = "capacity:8k (users doubling, then bisecting, to each model's KV capacity)"
    sizes_prompts: ClassVar[bool] = True
    planned_live: ClassVar[bool] = True

    @property
    def fixed_context(self) -> int:
        return int(self.levels[0])

    @property
    def duration_s(self) -> float:
        return self.stage_duration_s * CAPACITY_MAX_STAGES

    def check_run(self, config: TestConfig, profiles: list[Profile], paired: bool) -> None:
        check_ladder(config, [self.fixed_context], profiles)

    def to_text(self) -> str:
        return f"capacity:{self.fixed_context}"

    @classmethod
    def parse(cls, text: str, values: str, stage_duration_s: float) -> Self:
        try:
            tokens = parse_tokens(values)
        except (ValueError, IndexError):
            raise UsageError(f"shape {text!r}: use capacity:CONTEXT in tokens, e.g. capacity:8k") from None
        if not 1 <= tokens <= MAX_PROMPT_TOKENS:
            raise UsageError(f"shape {text!r}: the context must be from 1 to {MAX_PROMPT_TOKENS:,} tokens")
        return cls(levels=(float(tokens),), stage_duration_s=stage_duration_s)


ShapeSpec = (
    ConcurrencySpec | RateSpec | SweepSpec | ReplaySpec | ContextSpec | InterferenceSpec | DecodeSpec | CapacitySpec
)
"""A parsed shape: one class per kind (``kind`` is the tag), each with the same protocol."""
SHAPE_KINDS: dict[str, type[ShapeSpec]] = {
    cls.kind: cls
    for cls in (
        ConcurrencySpec,
        RateSpec,
        ContextSpec,
        InterferenceSpec,
        DecodeSpec,
        CapacitySpec,
        SweepSpec,
        ReplaySpec,
    )
}
"""Every kind by its ``kind`` tag, in the order the help and error texts list them."""


def _kinds_text(texts: list[str]) -> str:
    return ", ".join(texts[:-1]) + " or " + texts[-1]


def parse_shape(text: str, stage_duration_s: float, replay_speed: str | float | None = None) -> ShapeSpec:
    """Parse ``concurrency:1,8,64``, ``rate:0.5,1,2``, ``context:1k,16k``, ``sweep[:CAP]``, ``replay:PATH``
    (at ``--replay-speed``), or any kind :data:`SHAPE_KINDS` holds; errors say what a valid spec looks like."""
    kind, _colon, values = text.partition(":")
    spec_class = SHAPE_KINDS.get(kind.strip().lower())
    if spec_class is None:
        raise UsageError(f"unknown shape {text!r}: use {_kinds_text([k.usage for k in SHAPE_KINDS.values()])}")
    return with_replay_speed(spec_class.parse(text, values, stage_duration_s), replay_speed)


def with_replay_speed(spec: ShapeSpec, speed: str | float | None) -> ShapeSpec:
    """``--replay-speed`` applied to a replay shape; other shapes take none (a usage error if given)."""
    if speed is None or str(speed).strip() in ("", "1"):
        return spec
    try:
        value = float(speed)
    except ValueError:
        raise UsageError(f"--replay-speed {speed!r} is not a number: e.g. 2 (twice as fast) or 0.5") from None
    return spec.with_speed(value)


def shape_help() -> str:
    """``--shape``'s help: every kind :data:`SHAPE_KINDS` knows."""
    return _kinds_text([k.flag_help for k in SHAPE_KINDS.values()])
