"""Test configuration: the seed's two file formats, validated once into one frozen model.

``load_config(path)`` reads ``benchmark_config.json`` or ``taotoken_config.toml`` (by
suffix), checks it strictly (a misspelled key must fail, not vanish) and normalises
both into :class:`TestConfig`. Every problem becomes a one-line :class:`UsageError`
naming the file, the field (or line) and the fix. Nothing downstream reads raw dicts
or environment variables: API keys are resolved here by ``api_key()``.
"""

from __future__ import annotations

import math
import os
import random
import re
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    ValidationError,
    model_validator,
)

from attnload.config import limits
from attnload.errors import UsageError, describe_validation, register_secret

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class StrictModel(BaseModel):
    """Frozen, and unknown keys are errors: a typo in a config must fail loudly. Infinity and NaN are
    refused everywhere: one non-finite weight or timeout crashed every user mid-run."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def env_name(value: str | None) -> str | None:
    if value is None:
        return None
    if not _ENV_NAME.match(value):
        # Never echo the value: it is probably the key itself.
        raise ValueError(
            "api_key_env must name an environment variable (e.g. TAOTOKEN_API_KEY), "
            "not hold the key; export the key in that variable"
        )
    return value


# --------------------------------------------------------------------------- normalised model


class Price(StrictModel):
    """An API's price in USD per million tokens (``price_per_mtok``), like the seed's gateway charges."""

    input: float = Field(default=0.0, ge=0, le=1e6)
    output: float = Field(ge=0, le=1e6)


class ModelTarget(StrictModel):
    """One model under test: where to send, what to call it, which attention it uses."""

    key: str
    id: str
    attention: str
    max_context: int | None = None
    base_url: str
    url: str
    """Where this model's requests go: its API's endpoint (``api``), resolved from ``base_url``."""
    url_note: str
    api_key_env: str | None = None
    weight: float = Field(default=1.0, gt=0, le=limits.MAX_WEIGHT)
    metrics_url: str | None = None
    """The server's Prometheus ``/metrics`` (None: ``/metrics`` at the root of ``base_url``'s host)."""
    tokenizer: str | None = None
    """A local ``tokenizer.json``: exact prompt sizes and token counts when a server sends no usage."""
    gpu_metrics_url: str | None = None
    """dcgm-exporter's ``/metrics`` for this model's GPUs (None: DCGM series on ``metrics_url``, if any)."""
    gpu_selector: dict[str, str] | None = None
    """Label -> regex (full match) on dcgm-exporter's labels, picking this model's GPUs (docs/gpu-metrics.md)."""
    gpus: int | None = Field(default=None, gt=0, le=1_000_000)
    """GPUs serving this model (the verdict's per-GPU figures; None: DCGM's count, else the simulator's)."""
    gpu_hour_usd: float | None = Field(default=None, ge=0, le=1e6)
    """Self-hosted: USD per GPU-hour; the verdict's cost per million output tokens comes from it."""
    price_per_mtok: Price | None = None
    """An API: USD per million input and output tokens."""
    api: str = "chat"
    """The API requests go through (a name registered in ``attnload.apis``); ``url`` is that API's endpoint."""
    auth_header: str | None = None
    """The header that carries the key bare (e.g. Azure OpenAI's ``api-key``) instead of the API's own
    (``Authorization: Bearer``, ``x-api-key``, ``x-goog-api-key``); the key still comes from ``api_key_env``."""
    gpu_type: str | None = None
    """The GPU serving it, as a simulator GPU preset name (``h200``): its memory bandwidth turns the decode
    fit's slope into KV bytes read per token (``kv_read``, docs/microscope.md)."""
    memory_bandwidth_gbps: float | None = Field(default=None, gt=0, le=1e6)
    """The GPU's memory bandwidth in GB/s (decimal), when it is no preset; wins over ``gpu_type``."""

    def api_key(self) -> str | None:
        """The key from the environment (never from a file); registered for redaction."""
        if self.api_key_env is None:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise UsageError(
                f"environment variable {self.api_key_env} is not set (model {self.key}): "
                f"export {self.api_key_env}=<your key>; keys are never read from files"
            )
        register_secret(value)
        return value


class Distribution(StrictModel):
    """A token count drawn per request: ``fixed``, ``uniform``, ``normal`` or ``lognormal``, clamped to [min, max].

    Real traffic is not one prompt length; a distribution lets a profile look like a
    chat mix while staying reproducible (the workload's RNG is seeded). ``lognormal``
    takes the mean and stddev of the *counts*, not of their logarithm, so a config
    reads in tokens.
    """

    dist: Literal["fixed", "uniform", "normal", "lognormal"]
    value: int | None = Field(default=None, gt=0, le=limits.MAX_PROMPT_TOKENS)
    mean: float | None = Field(default=None, gt=0, le=limits.MAX_PROMPT_TOKENS)
    stddev: float | None = Field(default=None, ge=0, le=limits.MAX_PROMPT_TOKENS)
    min: int = Field(default=1, gt=0, le=limits.MAX_PROMPT_TOKENS)
    max: int = Field(default=1_000_000, gt=0, le=limits.MAX_PROMPT_TOKENS)

    @model_validator(mode="after")
    def _consistent(self) -> Distribution:
        if self.min > self.max:
            raise ValueError(f"distribution min {self.min} > max {self.max}; swap them")
        needs = {"fixed": ("value",), "uniform": (), "normal": ("mean", "stddev"), "lognormal": ("mean", "stddev")}[
            self.dist
        ]
        missing = [name for name in needs if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.dist} distribution needs {' and '.join(missing)}")
        if self.dist == "uniform" and "max" not in self.model_fields_set:
            raise ValueError("a uniform distribution needs min and max")
        return self

    def sample(self, rng: random.Random) -> int:
        """One draw, rounded and clamped to [min, max]."""
        if self.dist == "fixed":
            value = float(self.value or self.min)
        elif self.dist == "uniform":
            return rng.randint(self.min, self.max)
        elif self.dist == "normal":
            value = rng.gauss(self.mean or 0.0, self.stddev or 0.0)
        else:
            mean, stddev = self.mean or 1.0, self.stddev or 0.0
            sigma2 = math.log(1.0 + (stddev / mean) ** 2)
            value = rng.lognormvariate(math.log(mean) - sigma2 / 2.0, math.sqrt(sigma2))
        return int(min(max(round(value), self.min), self.max))


def _token_count(value: object) -> object:
    """Validate a distribution object here, so its own error (not the ``int`` branch's) is reported."""
    if isinstance(value, Mapping):
        try:
            return Distribution.model_validate(value)
        except ValidationError as exc:
            where, message, error = describe_validation(exc)
            message = limits.with_value(message, error)
            raise ValueError(f"{where}: {message}" if where else message) from None
    return value


TokenCount = Annotated[int | Distribution, BeforeValidator(_token_count)]
"""A fixed count, or a distribution drawn per request."""


def sample_count(count: int | Distribution, rng: random.Random) -> int:
    return count if isinstance(count, int) else count.sample(rng)


# --------------------------------------------------------------------------- real chat traffic


class DurationDistribution(StrictModel):
    """Seconds drawn per use (think time): ``fixed``, ``uniform``, ``normal``, ``lognormal``, ``exponential``.

    ``Distribution`` counts whole tokens from 1 up; a think time is fractional seconds from
    0, so it has its own model. Draws are clamped to [min, max].
    """

    dist: Literal["fixed", "uniform", "normal", "lognormal", "exponential"]
    value: NonNegativeFloat | None = None
    mean: float | None = Field(default=None, gt=0)
    stddev: NonNegativeFloat | None = None
    min: NonNegativeFloat = 0.0
    max: NonNegativeFloat = 3600.0

    @model_validator(mode="after")
    def _consistent(self) -> DurationDistribution:
        if self.min > self.max:
            raise ValueError(f"distribution min {self.min} > max {self.max}; swap them")
        needs = {
            "fixed": ("value",),
            "uniform": (),
            "normal": ("mean", "stddev"),
            "lognormal": ("mean", "stddev"),
            "exponential": ("mean",),
        }[self.dist]
        missing = [name for name in needs if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.dist} think time needs {' and '.join(missing)}")
        if self.dist == "uniform" and "max" not in self.model_fields_set:
            raise ValueError("a uniform think time needs min and max")
        return self

    def sample(self, rng: random.Random) -> float:
        if self.dist == "fixed":
            value = self.value or 0.0
        elif self.dist == "uniform":
            value = rng.uniform(self.min, self.max)
        elif self.dist == "normal":
            value = rng.gauss(self.mean or 0.0, self.stddev or 0.0)
        elif self.dist == "exponential":
            value = rng.expovariate(1.0 / (self.mean or 1.0))
        else:
            mean, stddev = self.mean or 1.0, self.stddev or 0.0
            sigma2 = math.log(1.0 + (stddev / mean) ** 2)
            value = rng.lognormvariate(math.log(mean) - sigma2 / 2.0, math.sqrt(sigma2))
        return min(max(value, self.min), self.max)


def sample_seconds(value: float | DurationDistribution, rng: random.Random) -> float:
    return float(value) if isinstance(value, int | float) else value.sample(rng)


class ConversationSpec(StrictModel):
    """The profile key ``conversation``: turns per conversation, think time, user message size.

    ``user_tokens`` sizes every user message, the first (salt included) too; None leaves
    the messages to a dataset.
    """

    turns: TokenCount
    think_time_s: NonNegativeFloat | DurationDistribution = 0.0
    user_tokens: TokenCount | None = None

    @model_validator(mode="after")
    def _positive(self) -> ConversationSpec:
        for name in ("turns", "user_tokens"):
            value = getattr(self, name)
            if isinstance(value, int) and value < 1:
                raise ValueError(f"conversation.{name} must be at least 1, not {value}")
        return self


MAX_AGENT_STEPS = 1_000
"""Steps one agent session may take (a fixed count, or the largest a distribution can draw)."""
MAX_AGENT_TOOLS = 256
MAX_PARALLEL_CALLS = 64
MAX_SUB_AGENTS = 64


class ToolsSpec(StrictModel):
    """``agent.tools``: how many tool definitions ride on every request, and each one's size in tokens."""

    count: int = Field(default=4, ge=0, le=MAX_AGENT_TOOLS)
    tokens: int = Field(default=120, ge=16, le=limits.MAX_PROMPT_TOKENS)


class SubAgentsSpec(StrictModel):
    """``agent.sub_agents``: every ``every``-th step fans out to ``count`` short child sessions of ``steps``
    steps each, run at once; their final answers come back to the parent as its tool results."""

    count: int = Field(default=2, ge=1, le=MAX_SUB_AGENTS)
    steps: int = Field(default=2, ge=1, le=MAX_AGENT_STEPS)
    every: int = Field(default=4, ge=1, le=MAX_AGENT_STEPS)


def _tools_spec(value: object) -> object:
    """``tools: 6`` is shorthand for six definitions of the default size."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"agent.tools must be at least 0, not {value}")
        return {"count": value}
    return value


class AgentSpec(StrictModel):
    """The profile key ``agent``: a tool-calling loop whose history grows by a tool result every step.

    Each step resends the whole history (system prompt, the ``tools`` array, every earlier reply,
    tool call and tool result), keeps the streamed reply verbatim, appends a client-made tool call
    and a ``role: tool`` result of ``tool_result_tokens``, then waits ``tool_time_s`` (the tool runs).
    ``tool_choice`` is omitted unless set (``none`` drives a server without tool-call parsing).
    """

    steps: TokenCount
    system_tokens: int = Field(default=1_000, ge=8, le=limits.MAX_PROMPT_TOKENS)
    tools: Annotated[ToolsSpec, BeforeValidator(_tools_spec)] = ToolsSpec()
    tool_choice: Literal["auto", "none", "required"] | None = None
    tool_result_tokens: TokenCount = 500
    tool_time_s: NonNegativeFloat | DurationDistribution = 1.0
    parallel_calls: int = Field(default=1, ge=1, le=MAX_PARALLEL_CALLS)
    sub_agents: SubAgentsSpec | None = None

    @model_validator(mode="after")
    def _bounded(self) -> AgentSpec:
        for name in ("steps", "tool_result_tokens"):
            value = getattr(self, name)
            if isinstance(value, int) and value < 1:
                raise ValueError(f"agent.{name} must be at least 1, not {value}")
        steps = self.steps if isinstance(self.steps, int) else (self.steps.value or self.steps.max)
        if steps > MAX_AGENT_STEPS:
            raise ValueError(
                f"agent.steps {steps} is out of range: at most {MAX_AGENT_STEPS:,} steps per session "
                "(lower it, or set a distribution's max)"
            )
        result = self.tool_result_tokens
        largest = result if isinstance(result, int) else (result.value or result.max)
        if largest > limits.MAX_PROMPT_TOKENS:
            raise ValueError(
                f"agent.tool_result_tokens {largest} is out of range: at most {limits.MAX_PROMPT_TOKENS:,}"
            )
        return self


class DatasetSpec(StrictModel):
    """The profile key ``dataset``: where the prompts come from and how long the answers are."""

    path: str = Field(min_length=1)
    format: Literal["sharegpt", "jsonl", "auto"] = "auto"
    output_tokens: Literal["dataset"] | TokenCount = "dataset"
    """``dataset``: the record's ``max_tokens``, else its recorded reply's estimated length."""
    turns: Literal["first", "all"] = "first"
    """``all`` replays a record's human turns as one conversation."""


class ProfileSpec(StrictModel):
    """What a workload profile asks for, as a config file spells it (the name is its key there)."""

    prompt: str | None = None
    prompt_tokens: TokenCount | None = None
    max_tokens: TokenCount | None = None
    shared_prefix_ratio: float = Field(default=0.0, ge=0.0, le=1.0)
    prefixes: int = Field(default=1, ge=1, le=limits.MAX_PREFIXES)
    weight: float = Field(default=1.0, gt=0, le=limits.MAX_WEIGHT)
    ignore_eos: bool | None = None
    conversation: ConversationSpec | None = None
    """Multi-turn chat: each request resends the history plus the streamed answer (workloads.md)."""
    dataset: DatasetSpec | None = None
    """Prompts from a local ShareGPT/JSONL file instead of built text."""
    agent: AgentSpec | None = None
    """Agent sessions: tool-calling loops, the history growing by a tool result a step (workloads.md)."""

    @model_validator(mode="after")
    def _bounded(self) -> ProfileSpec:
        check_token_bounds(self.prompt_tokens, self.max_tokens)
        return self


class Profile(ProfileSpec):
    """A named workload: what each request asks for.

    ``prompt_tokens`` builds a prompt of that many tokens (by the shared local estimator,
    so the server's ``usage`` agrees); ``shared_prefix_ratio`` of it is one of
    ``prefixes`` fixed texts placed *before* the salt, so a prefix cache can hit it.
    ``ignore_eos`` (None: the request setting) asks the server to emit exactly
    ``max_tokens`` (``ignore_eos`` + ``min_tokens``, vLLM/SGLang extensions).
    """

    name: str

    @property
    def sized(self) -> bool:
        """Whether the profile says what to send: ``prompt``, ``prompt_tokens`` or a conversation. A profile
        without (only ``max_tokens``, say) needs a shape that sizes prompts itself (``workload.prompts``)."""
        return self.prompt is not None or self.prompt_tokens is not None or self.conversational

    @property
    def conversational(self) -> bool:
        """Whether requests come from conversations (a dataset's records are conversations too)."""
        return self.conversation is not None or self.dataset is not None or self.agent is not None

    @model_validator(mode="after")
    def _has_prompt(self) -> Profile:
        if self.conversation is not None and self.dataset is None and self.conversation.user_tokens is None:
            raise ValueError(f"profile {self.name!r}: conversation needs user_tokens (or a dataset for the messages)")
        if self.agent is not None and (self.conversation is not None or self.dataset is not None):
            raise ValueError(f"profile {self.name!r}: agent takes no conversation or dataset (pick one)")
        for name in ("prompt_tokens", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, int) and value <= 0:
                raise ValueError(f"profile {self.name!r}: {name} must be positive, got {value}")
        if not limits.is_name(self.name):
            raise ValueError(f"profile name {self.name!r} is refused: {limits.NAME_RULE}")
        if self.shared_prefix_ratio > 0 and self.prompt_tokens is None:
            raise ValueError(
                f"profile {self.name!r}: shared_prefix_ratio needs prompt_tokens (the prefix is a "
                "share of the built prompt)"
            )
        return self


def check_token_bounds(prompt_tokens: int | Distribution | None, max_tokens: int | Distribution | None) -> None:
    """Token counts within :mod:`limits`: a fixed count, or the largest a distribution can draw."""
    for name, value, high in (
        ("prompt_tokens", prompt_tokens, limits.MAX_PROMPT_TOKENS),
        ("max_tokens", max_tokens, limits.MAX_OUTPUT_TOKENS),
    ):
        largest = value if isinstance(value, int) or value is None else (value.value or value.max)
        if largest is not None and largest > high:
            raise ValueError(
                f"{name} {largest} is out of range: at most {high:,} tokens per request (lower it; see docs/limits.md)"
            )


class RequestSettings(StrictModel):
    """Per-request parameters. The seed's ``[request] timeout`` sets ``total_timeout_s``."""

    max_tokens: int = Field(default=256, gt=0, le=limits.MAX_OUTPUT_TOKENS)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    stream: bool = True
    connect_timeout_s: float = Field(default=10.0, gt=0, le=limits.MAX_TIMEOUT_S)
    ttft_timeout_s: float | None = Field(default=None, gt=0, le=limits.MAX_TIMEOUT_S)
    idle_timeout_s: float = Field(default=60.0, gt=0, le=limits.MAX_TIMEOUT_S)
    total_timeout_s: float = Field(default=600.0, gt=0, le=limits.MAX_TIMEOUT_S)
    ignore_eos: bool = False
    unique_salt: bool = True
    retry_after_max_s: float = Field(default=0.0, ge=0.0, le=limits.MAX_TIMEOUT_S)
    """After a 429/503 with Retry-After, that user waits up to this long before its next request (0 = off)."""
    connect_backoff_s: float = Field(default=0.1, ge=0.0, le=limits.MAX_TIMEOUT_S)
    """After a ``connection`` failure the next try waits this long, doubling per failure (with jitter) up to
    ``connect_backoff_max_s``; the first success resets it. 0 turns the backoff off."""
    connect_backoff_max_s: float = Field(default=5.0, gt=0.0, le=limits.MAX_TIMEOUT_S)
    """The longest connection backoff."""


class Slo(StrictModel):
    """Service-level objectives; a request meeting all set ones counts toward goodput."""

    ttft_p99_s: float | None = Field(default=None, gt=0, le=limits.MAX_TIMEOUT_S)
    itl_p99_s: float | None = Field(default=None, gt=0, le=limits.MAX_TIMEOUT_S)
    e2e_p99_s: float | None = Field(default=None, gt=0, le=limits.MAX_TIMEOUT_S)

    @property
    def is_set(self) -> bool:
        return any(v is not None for v in (self.ttft_p99_s, self.itl_p99_s, self.e2e_p99_s))


class TestConfig(StrictModel):
    """The whole validated test: models, workload profiles and request settings."""

    source: str
    sha256: str
    provider: str | None = None
    models: tuple[ModelTarget, ...]
    profiles: tuple[Profile, ...]
    request: RequestSettings = RequestSettings()
    repeat: int = 5
    slo: Slo = Slo()
    shape: str | None = None
    stage_duration_s: float | None = None
    arrivals: Literal["poisson", "constant"] = "poisson"
    """Open-loop (``rate:``) inter-arrival law; ``--arrivals`` overrides it."""
    seed: int = 0
    """Seeds arrival schedules and profile draws, so two runs send the same sequence."""

    @model_validator(mode="after")
    def _agents_speak_chat(self) -> TestConfig:
        """An agent's history (assistant ``tool_calls``, ``role: tool`` results, the ``tools`` array) is chat's."""
        agents = [p.name for p in self.profiles if p.agent is not None]
        others = [f"{m.key} ({m.api})" for m in self.models if m.api != "chat"]
        if agents and others:
            raise ValueError(
                f"agent profile {agents[0]} sends chat tool calls, but model {others[0]} speaks another API: "
                'set api = "chat" for it, or run the agent profile against chat models only'
            )
        return self

    def model(self, key: str) -> ModelTarget:
        for target in self.models:
            if target.key == key:
                return target
        raise UsageError(f"unknown model key {key!r}; the config has: {', '.join(m.key for m in self.models)}")

    def profile(self, name: str) -> Profile:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        raise UsageError(f"unknown profile {name!r}; the config has: {', '.join(p.name for p in self.profiles)}")
