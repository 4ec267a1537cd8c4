"""Test configuration: the seed's two file formats, validated once into one frozen model.

``load_config(path)`` reads ``benchmark_config.json`` or ``taotoken_config.toml`` (by
suffix), checks it strictly (a misspelled key must fail, not vanish) and normalises
both into :class:`TestConfig`. Every problem becomes a one-line :class:`UsageError`
naming the file, the field (or line) and the fix. Nothing downstream reads raw dicts
or environment variables: API keys are resolved here by ``api_key()``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from attnload.errors import UsageError, register_secret

ATTENTION_TYPES = ("GQA", "MLA", "GTA", "GLA", "MHA", "MQA")
CHAT_PATH = "/v1/chat/completions"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LITERAL_KEY_FIELDS = ("api_key", "apikey", "key", "token", "authorization")


class StrictModel(BaseModel):
    """Frozen, and unknown keys are errors: a typo in a config must fail loudly."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def _attention(value: object) -> str:
    text = str(value).strip().upper()
    if text not in ATTENTION_TYPES:
        raise ValueError(f"unknown attention type {value!r}; valid: {', '.join(ATTENTION_TYPES)}")
    return text


def _env_name(value: str | None) -> str | None:
    if value is None:
        return None
    if not _ENV_NAME.match(value):
        # Never echo the value: it is probably the key itself.
        raise ValueError("api_key_env must name an environment variable (e.g. TAOTOKEN_API_KEY), "
                         "not hold the key; export the key in that variable")
    return value


# --------------------------------------------------------------------------- normalised model


class ModelTarget(StrictModel):
    """One model under test: where to send, what to call it, which attention it uses."""

    key: str
    id: str
    attention: str
    max_context: int | None = None
    base_url: str
    chat_url: str
    url_note: str
    api_key_env: str | None = None
    weight: float = 1.0

    def api_key(self) -> str | None:
        """The key from the environment (never from a file); registered for redaction."""
        if self.api_key_env is None:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise UsageError(f"environment variable {self.api_key_env} is not set (model {self.key}): "
                             f"export {self.api_key_env}=<your key>; keys are never read from files")
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
    value: int | None = Field(default=None, gt=0)
    mean: float | None = Field(default=None, gt=0)
    stddev: float | None = Field(default=None, ge=0)
    min: int = Field(default=1, gt=0)
    max: int = Field(default=1_000_000, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> Distribution:
        if self.min > self.max:
            raise ValueError(f"distribution min {self.min} > max {self.max}; swap them")
        needs = {"fixed": ("value",), "uniform": (), "normal": ("mean", "stddev"),
                 "lognormal": ("mean", "stddev")}[self.dist]
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
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            message = error["msg"].removeprefix("Value error, ")
            raise ValueError(f"{where}: {message}" if where else message) from None
    return value


TokenCount = Annotated[int | Distribution, BeforeValidator(_token_count)]
"""A fixed count, or a distribution drawn per request."""


def sample_count(count: int | Distribution, rng: random.Random) -> int:
    return count if isinstance(count, int) else count.sample(rng)


class Profile(StrictModel):
    """A named workload: what each request asks for.

    ``prompt_tokens`` builds a prompt of that many tokens (by the shared local estimator,
    so the server's ``usage`` agrees); ``shared_prefix_ratio`` of it is one of
    ``prefixes`` fixed texts placed *before* the salt, so a prefix cache can hit it.
    ``ignore_eos`` (None: the request setting) asks the server to emit exactly
    ``max_tokens`` (``ignore_eos`` + ``min_tokens``, vLLM/SGLang extensions).
    """

    name: str
    prompt: str | None = None
    prompt_tokens: TokenCount | None = None
    max_tokens: TokenCount | None = None
    shared_prefix_ratio: float = Field(default=0.0, ge=0.0, le=1.0)
    prefixes: int = Field(default=1, ge=1)
    weight: float = Field(default=1.0, gt=0)
    ignore_eos: bool | None = None

    @model_validator(mode="after")
    def _has_prompt(self) -> Profile:
        if self.prompt is None and self.prompt_tokens is None:
            raise ValueError(f"profile {self.name!r} needs `prompt` (text) or `prompt_tokens` (a count)")
        for name in ("prompt_tokens", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, int) and value <= 0:
                raise ValueError(f"profile {self.name!r}: {name} must be positive, got {value}")
        if self.shared_prefix_ratio > 0 and self.prompt_tokens is None:
            raise ValueError(f"profile {self.name!r}: shared_prefix_ratio needs prompt_tokens (the prefix is a "
                             "share of the built prompt)")
        return self


class RequestSettings(StrictModel):
    """Per-request parameters. The seed's ``[request] timeout`` sets ``total_timeout_s``."""

    max_tokens: int = Field(default=256, gt=0)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    stream: bool = True
    connect_timeout_s: float = Field(default=10.0, gt=0)
    ttft_timeout_s: float | None = Field(default=None, gt=0)
    idle_timeout_s: float = Field(default=60.0, gt=0)
    total_timeout_s: float = Field(default=600.0, gt=0)
    ignore_eos: bool = False
    unique_salt: bool = True
    retry_after_max_s: float = Field(default=0.0, ge=0.0)
    """After a 429/503 with Retry-After, that user waits up to this long before its next request (0 = off)."""


class Slo(StrictModel):
    """Service-level objectives; a request meeting all set ones counts toward goodput."""

    ttft_p99_s: float | None = Field(default=None, gt=0)
    itl_p99_s: float | None = Field(default=None, gt=0)
    e2e_p99_s: float | None = Field(default=None, gt=0)

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


def resolve_chat_url(base_url: str) -> tuple[str, str, str]:
    """``(root, chat_url, note)``: accept a gateway root (``.../api``), a ``.../v1`` base or a full URL.

    The seed's gateway root is ``https://host/api`` and clients append
    ``/v1/chat/completions``; a base that already ends in ``/v1`` must not become
    ``/v1/v1``.
    """
    url = base_url.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError(f"base_url {base_url!r} must start with http:// or https:// and name a host")
    if url.endswith("/chat/completions"):
        root = url[: -len("/chat/completions")]
        root = root[:-3] if root.endswith("/v1") else root
        return root, url, "base_url is a full chat-completions URL; used as given"
    if url.endswith("/v1"):
        root = url[:-3]
        return root, root + CHAT_PATH, f"base_url ends in /v1; used {root + CHAT_PATH} (not /v1/v1)"
    return url, url + CHAT_PATH, f"appended {CHAT_PATH} to base_url"


# --------------------------------------------------------------------------- raw file formats


class _JsonModel(StrictModel):
    id: str
    attention_type: str
    max_context: int | None = Field(default=None, gt=0)
    base_url: str | None = None
    api_key_env: str | None = None
    weight: float = Field(default=1.0, gt=0)

    _attention = field_validator("attention_type")(lambda v: _attention(v))
    _env = field_validator("api_key_env")(lambda v: _env_name(v))


class _Benchmark(StrictModel):
    repeat: int = Field(default=5, ge=1)
    max_tokens: int = Field(default=256, gt=0)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)


class _RawProfile(StrictModel):
    prompt: str | None = None
    prompt_tokens: TokenCount | None = None
    max_tokens: TokenCount | None = None
    shared_prefix_ratio: float = Field(default=0.0, ge=0.0, le=1.0)
    prefixes: int = Field(default=1, ge=1)
    weight: float = Field(default=1.0, gt=0)
    ignore_eos: bool | None = None


class _Extensions(StrictModel):
    """Optional keys both formats accept beyond the seed's."""

    test_prompts: dict[str, str] = {}
    workload: dict[str, _RawProfile] = {}
    request: RequestSettings | None = None
    slo: Slo = Slo()
    shape: str | None = None
    stage_duration_s: float | None = Field(default=None, gt=0)
    arrivals: Literal["poisson", "constant"] = "poisson"
    seed: int = 0


class _JsonConfig(_Extensions):
    base_url: str
    api_key_env: str | None = None
    models: dict[str, _JsonModel] = Field(min_length=1)
    benchmark: _Benchmark = _Benchmark()

    _env = field_validator("api_key_env")(lambda v: _env_name(v))


class _Provider(StrictModel):
    name: str | None = None
    base_url: str
    api_key_env: str | None = None

    _env = field_validator("api_key_env")(lambda v: _env_name(v))


class _TomlModel(StrictModel):
    id: str
    attention: str
    context_window: int | None = Field(default=None, gt=0)
    base_url: str | None = None
    api_key_env: str | None = None
    weight: float = Field(default=1.0, gt=0)

    _attention = field_validator("attention")(lambda v: _attention(v))
    _env = field_validator("api_key_env")(lambda v: _env_name(v))


class _TomlRequest(StrictModel):
    max_tokens: int = Field(default=256, gt=0)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    timeout: float | None = Field(default=None, gt=0)
    connect_timeout_s: float | None = Field(default=None, gt=0)
    ttft_timeout_s: float | None = Field(default=None, gt=0)
    idle_timeout_s: float | None = Field(default=None, gt=0)
    retry_after_max_s: float | None = Field(default=None, ge=0)
    ignore_eos: bool = False
    unique_salt: bool = True
    stream: bool = True


class _TomlConfig(_Extensions):
    provider: _Provider
    models: dict[str, _TomlModel] = Field(min_length=1)
    request: _TomlRequest = _TomlRequest()  # type: ignore[assignment]
    benchmark: _Benchmark | None = None


# --------------------------------------------------------------------------- loading

DEFAULT_PROMPT = "Explain the attention mechanism of a transformer in one paragraph."


def load_config(path: str | os.PathLike[str]) -> TestConfig:
    """Read, validate and normalise a config file; raise :class:`UsageError` on any problem."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"config file {file} not found: pass -c with the path to a .json or .toml file "
                         "(see examples/benchmark_config.json)")
    raw_bytes = file.read_bytes()
    text = raw_bytes.decode("utf-8", errors="replace")
    data = _parse(file, text)
    _refuse_literal_keys(file, data)
    try:
        if file.suffix.lower() == ".toml":
            return _from_toml(file, raw_bytes, _TomlConfig.model_validate(data))
        return _from_json(file, raw_bytes, _JsonConfig.model_validate(data))
    except ValidationError as exc:
        raise UsageError(_describe_validation(file, text, exc)) from None
    except ValueError as exc:
        raise UsageError(f"{file}: {exc}") from None


def _parse(file: Path, text: str) -> dict[str, Any]:
    suffix = file.suffix.lower()
    try:
        if suffix == ".toml":
            return tomllib.loads(text)
        if suffix == ".json":
            data = json.loads(text)
        else:
            raise UsageError(f"{file}: unknown config format {suffix or '(none)'}: use a .json or .toml file")
    except json.JSONDecodeError as exc:
        raise UsageError(f"{file}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}; fix the syntax") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{file}: invalid TOML: {exc}; fix the syntax") from None
    if not isinstance(data, dict):
        raise UsageError(f"{file}: the top level must be an object with base_url and models")
    return data


def _refuse_literal_keys(file: Path, data: Mapping[str, Any], where: str = "") -> None:
    for name, value in data.items():
        here = f"{where}.{name}" if where else name
        if name.lower() in _LITERAL_KEY_FIELDS and isinstance(value, str):
            raise UsageError(f"{file}: {here} holds a literal API key, which is refused: delete it, "
                             "export the key in an env var and name that var in api_key_env")
        if isinstance(value, Mapping):
            _refuse_literal_keys(file, value, here)


def _describe_validation(file: Path, text: str, exc: ValidationError) -> str:
    errors = exc.errors()
    # A misspelled key also makes the real key "missing": report the typo, which is the cause.
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = ".".join(str(part) for part in error["loc"])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown key (misspelled?); remove it or check DESIGN.md for the valid keys"
    elif error["type"] == "missing":
        message = "required field is missing; add it"
    line = _line_of(text, str(error["loc"][-1])) if error["loc"] else None
    where = f"{file}:{line}" if line else str(file)
    return f"{where}: {loc}: {message}"


def _line_of(text: str, key: str) -> int | None:
    for number, line in enumerate(text.splitlines(), start=1):
        if re.search(rf'(^|[\s"{{,\[.]){re.escape(key)}["\s]*[:=\]]', line):
            return number
    return None


def _targets(models: Mapping[str, Any], base_url: str, api_key_env: str | None,
             fields: tuple[str, str]) -> tuple[ModelTarget, ...]:
    attention_field, context_field = fields
    targets = []
    for key, raw in models.items():
        root, chat_url, note = resolve_chat_url(raw.base_url or base_url)
        targets.append(ModelTarget(
            key=key, id=raw.id, attention=getattr(raw, attention_field),
            max_context=getattr(raw, context_field), base_url=root, chat_url=chat_url, url_note=note,
            api_key_env=raw.api_key_env or api_key_env, weight=raw.weight))
    return tuple(targets)


def _profiles(ext: _Extensions) -> tuple[Profile, ...]:
    profiles = [Profile(name=name, prompt=text) for name, text in ext.test_prompts.items()]
    profiles += [Profile(name=name, **{k: getattr(raw, k) for k in type(raw).model_fields})
                 for name, raw in ext.workload.items()]
    names = [p.name for p in profiles]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"profile names {sorted(duplicates)} appear in both test_prompts and workload; rename one")
    return tuple(profiles) or (Profile(name="default", prompt=DEFAULT_PROMPT),)


def _from_json(file: Path, raw_bytes: bytes, cfg: _JsonConfig) -> TestConfig:
    request = cfg.request or RequestSettings(max_tokens=cfg.benchmark.max_tokens,
                                             temperature=cfg.benchmark.temperature)
    return TestConfig(
        source=str(file), sha256=hashlib.sha256(raw_bytes).hexdigest(), provider=None,
        models=_targets(cfg.models, cfg.base_url, cfg.api_key_env, ("attention_type", "max_context")),
        profiles=_profiles(cfg), request=request, repeat=cfg.benchmark.repeat, slo=cfg.slo,
        shape=cfg.shape, stage_duration_s=cfg.stage_duration_s,
        arrivals=cfg.arrivals, seed=cfg.seed)


def _from_toml(file: Path, raw_bytes: bytes, cfg: _TomlConfig) -> TestConfig:
    req = cfg.request
    settings: dict[str, Any] = {"max_tokens": req.max_tokens, "temperature": req.temperature,
                                "ignore_eos": req.ignore_eos, "unique_salt": req.unique_salt, "stream": req.stream}
    for name in ("connect_timeout_s", "ttft_timeout_s", "idle_timeout_s", "retry_after_max_s"):
        if getattr(req, name) is not None:
            settings[name] = getattr(req, name)
    if req.timeout is not None:
        settings["total_timeout_s"] = req.timeout  # the seed's `timeout` bounds the whole request
    return TestConfig(
        source=str(file), sha256=hashlib.sha256(raw_bytes).hexdigest(), provider=cfg.provider.name,
        models=_targets(cfg.models, cfg.provider.base_url, cfg.provider.api_key_env, ("attention", "context_window")),
        profiles=_profiles(cfg), request=RequestSettings(**settings),
        repeat=cfg.benchmark.repeat if cfg.benchmark else 5, slo=cfg.slo,
        shape=cfg.shape, stage_duration_s=cfg.stage_duration_s,
        arrivals=cfg.arrivals, seed=cfg.seed)
