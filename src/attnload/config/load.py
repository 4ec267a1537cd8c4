"""The seed's two file formats, read and validated into one :class:`TestConfig`.

``load_config(path)`` reads ``benchmark_config.json`` or ``taotoken_config.toml`` (by
suffix), checks it strictly (a misspelled key must fail, not vanish) and normalises
both into :class:`TestConfig`. Every problem becomes a one-line :class:`UsageError`
naming the file, the field (or line) and the fix.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator

from attnload.apis import DEFAULT_API, api_of
from attnload.attention import parse_attention
from attnload.config import limits
from attnload.config.model import (
    ModelTarget,
    Price,
    Profile,
    ProfileSpec,
    RequestSettings,
    Slo,
    StrictModel,
    TestConfig,
    env_name,
)
from attnload.config.urls import api_url, check_api, check_header_name, check_url, metrics_url, resolve_chat_url
from attnload.errors import UsageError, describe_validation
from attnload.scrape.dcgm import check_selector

_LITERAL_KEY_FIELDS = ("api_key", "apikey", "key", "token", "authorization")


# --------------------------------------------------------------------------- raw file formats


class _SeedModel(StrictModel):
    """One ``models.KEY`` entry of either seed format (the TOML's spelling; see :class:`_JsonModel`)."""

    id: str
    attention: str
    context_window: int | None = Field(default=None, gt=0, le=limits.MAX_CONTEXT_TOKENS)
    base_url: str | None = None
    api_key_env: str | None = None
    weight: float = Field(default=1.0, gt=0, le=limits.MAX_WEIGHT)
    metrics_url: str | None = None
    tokenizer: str | None = None
    gpu_metrics_url: str | None = None
    gpu_selector: dict[str, str] | None = None
    gpus: int | None = Field(default=None, gt=0, le=1_000_000)
    gpu_hour_usd: float | None = Field(default=None, ge=0, le=1e6)
    price_per_mtok: Price | None = None
    api: str = "chat"
    auth_header: str | None = None
    gpu_type: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$")
    memory_bandwidth_gbps: float | None = Field(default=None, gt=0, le=1e6)

    _attention = field_validator("attention")(lambda v: parse_attention(v))
    _auth_header = field_validator("auth_header")(lambda v: v if v is None else check_header_name(v))
    _api = field_validator("api")(lambda v: check_api(v))
    _url = field_validator("base_url")(lambda v: v if v is None else check_url(v))
    _env = field_validator("api_key_env")(lambda v: env_name(v))
    _metrics = field_validator("metrics_url")(lambda v: metrics_url(v))
    _gpu_url = field_validator("gpu_metrics_url")(lambda v: v if v is None else check_url(v, "gpu_metrics_url"))
    _gpu_selector = field_validator("gpu_selector")(lambda v: v if v is None else check_selector(v))


JSON_ALIASES = {"attention": "attention_type", "context_window": "max_context"}
"""benchmark_config.json spells two model keys its own way; each format accepts only its own spelling."""


class _JsonModel(_SeedModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=lambda name: JSON_ALIASES.get(name, name))


class _Benchmark(StrictModel):
    repeat: int = Field(default=5, ge=1, le=limits.MAX_REPEAT)
    max_tokens: int = Field(default=256, gt=0, le=limits.MAX_OUTPUT_TOKENS)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)


class _Extensions(StrictModel):
    """Optional keys both formats accept beyond the seed's."""

    test_prompts: dict[str, str] = {}
    workload: dict[str, ProfileSpec] = {}
    slo: Slo = Slo()
    shape: str | None = None
    stage_duration_s: float | None = Field(default=None, gt=0, le=limits.MAX_DURATION_S)
    arrivals: Literal["poisson", "constant"] = "poisson"
    seed: int = Field(default=0, ge=0, le=limits.MAX_SEED)


class _JsonConfig(_Extensions):
    base_url: str
    api_key_env: str | None = None
    request: RequestSettings | None = None
    models: dict[str, _JsonModel] = Field(min_length=1)
    benchmark: _Benchmark = _Benchmark()

    _env = field_validator("api_key_env")(lambda v: env_name(v))
    _url = field_validator("base_url")(lambda v: check_url(v))


class _Provider(StrictModel):
    name: str | None = None
    base_url: str
    api_key_env: str | None = None

    _env = field_validator("api_key_env")(lambda v: env_name(v))
    _url = field_validator("base_url")(lambda v: check_url(v))


class _TomlRequest(StrictModel):
    max_tokens: int = Field(default=256, gt=0, le=limits.MAX_OUTPUT_TOKENS)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    timeout: float | None = Field(default=None, gt=0, le=limits.MAX_TIMEOUT_S)
    connect_timeout_s: float | None = Field(default=None, gt=0, le=limits.MAX_TIMEOUT_S)
    ttft_timeout_s: float | None = Field(default=None, gt=0, le=limits.MAX_TIMEOUT_S)
    idle_timeout_s: float | None = Field(default=None, gt=0, le=limits.MAX_TIMEOUT_S)
    retry_after_max_s: float | None = Field(default=None, ge=0, le=limits.MAX_TIMEOUT_S)
    connect_backoff_s: float | None = Field(default=None, ge=0, le=limits.MAX_TIMEOUT_S)
    connect_backoff_max_s: float | None = Field(default=None, gt=0, le=limits.MAX_TIMEOUT_S)
    ignore_eos: bool = False
    unique_salt: bool = True
    stream: bool = True


class _TomlConfig(_Extensions):
    provider: _Provider
    models: dict[str, _SeedModel] = Field(min_length=1)
    request: _TomlRequest = _TomlRequest()
    benchmark: _Benchmark | None = None


# --------------------------------------------------------------------------- loading

DEFAULT_PROMPT = "Explain the attention mechanism of a transformer in one paragraph."


def load_config(path: str | os.PathLike[str]) -> TestConfig:
    """Read, validate and normalise a config file; raise :class:`UsageError` on any problem."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(
            f"config file {file} not found: pass -c with the path to a .json or .toml file "
            "(see examples/benchmark_config.json)"
        )
    if file.stat().st_size > limits.MAX_CONFIG_BYTES:
        raise UsageError(
            f"{file}: {file.stat().st_size} bytes is not a config (limit "
            f"{limits.MAX_CONFIG_BYTES // 2**20} MiB): pass the .json or .toml test config to -c"
        )
    raw_bytes = file.read_bytes()
    text = raw_bytes.decode("utf-8", errors="replace")
    data = _parse(file, text)
    try:
        limits.check_tree(data)  # before anything recursive walks it
    except limits.LimitError as exc:
        key = exc.where.rpartition(".")[2]
        line = _line_of(text, key) if text.count(key) == 1 else None  # a common key would name the wrong line
        raise UsageError(f"{file}:{line}: {exc}" if line else f"{file}: {exc}") from None
    _refuse_literal_keys(file, data)
    try:
        if file.suffix.lower() == ".toml":
            return _from_toml(file, raw_bytes, _TomlConfig.model_validate(data))
        return _from_json(file, raw_bytes, _JsonConfig.model_validate(data))
    except ValidationError as exc:
        raise UsageError(_describe_validation(file, text, exc)) from None
    except ValueError as exc:
        raise UsageError(f"{file}: {exc}") from None
    except RecursionError:  # check_tree bounds depth; this is the backstop at the one mapping boundary
        raise UsageError(f"{file}: nesting too deep to read: a config nests at most 5 levels") from None


def _parse(file: Path, text: str) -> dict[str, Any]:
    suffix = file.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise UsageError(f"{file}: unknown config format {suffix or '(none)'}: use a .json or .toml file")
    try:
        limits.scan_depth(text, toml=suffix == ".toml")
        if suffix == ".toml":
            data = tomllib.loads(text)  # refuses a duplicate key itself
        else:
            data = json.loads(text, object_pairs_hook=limits.refuse_duplicates)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{file}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}; fix the syntax") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{file}: invalid TOML: {exc}; fix the syntax") from None
    except limits.LimitError as exc:
        raise UsageError(f"{file}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of more than 4300 digits
        raise UsageError(f"{file}: unreadable value ({str(exc)[:120]}); fix the number or the nesting") from None
    if not isinstance(data, dict):
        raise UsageError(f"{file}: the top level must be an object with base_url and models")
    return data


def _refuse_literal_keys(file: Path, data: Mapping[str, Any], where: str = "") -> None:
    for name, value in data.items():
        here = f"{where}.{name}" if where else name
        if name.lower() in _LITERAL_KEY_FIELDS and isinstance(value, str):
            raise UsageError(
                f"{file}: {here} holds a literal API key, which is refused: delete it, "
                "export the key in an env var and name that var in api_key_env"
            )
        if isinstance(value, Mapping):
            _refuse_literal_keys(file, value, here)


def _describe_validation(file: Path, text: str, exc: ValidationError) -> str:
    loc, message, error = describe_validation(exc, prefer_unknown_key=True)
    if error["type"] == "extra_forbidden":
        message = "unknown key (misspelled?); remove it or see docs/design.md (Configuration) for the valid keys"
    elif error["type"] == "missing":
        message = "required field is missing; add it"
    line = _line_of(text, str(error["loc"][-1])) if error["loc"] else None
    where = f"{file}:{line}" if line else str(file)
    if loc:
        where += f": {loc}"  # a whole-config check (e.g. agents with a non-chat API) has no field to name
    return f"{where}: {limits.with_value(message, error)}"


def _line_of(text: str, key: str) -> int | None:
    for number, line in enumerate(text.splitlines(), start=1):
        if re.search(rf'(^|[\s"{{,\[.]){re.escape(key)}["\s]*[:=\]]', line):
            return number
    return None


def _targets(models: Mapping[str, _SeedModel], base_url: str, api_key_env: str | None) -> tuple[ModelTarget, ...]:
    targets = []
    for key, raw in models.items():
        root, chat_url, note = resolve_chat_url(raw.base_url or base_url)
        api = api_of(raw.api)
        if api.needs_key and not (raw.api_key_env or api_key_env):
            raise ValueError(
                f"model {key}: api {raw.api} needs an API key (sent as {api.headers('KEY').split(':')[0]}): "
                "add api_key_env naming the environment variable that holds it"
            )
        if api is not DEFAULT_API:
            chat_url = api_url(chat_url, raw.api, raw.id)
            note = f"{note}; api {raw.api}: sent to {chat_url}"
        targets.append(
            ModelTarget(
                key=key,
                id=raw.id,
                attention=raw.attention,
                max_context=raw.context_window,
                base_url=root,
                url=chat_url,
                url_note=note,
                api_key_env=raw.api_key_env or api_key_env,
                weight=raw.weight,
                metrics_url=raw.metrics_url,
                tokenizer=raw.tokenizer,
                gpu_metrics_url=raw.gpu_metrics_url,
                gpu_selector=raw.gpu_selector,
                gpus=raw.gpus,
                gpu_hour_usd=raw.gpu_hour_usd,
                price_per_mtok=raw.price_per_mtok,
                api=raw.api,
                auth_header=raw.auth_header,
                gpu_type=raw.gpu_type,
                memory_bandwidth_gbps=raw.memory_bandwidth_gbps,
            )
        )
    return tuple(targets)


def _profiles(ext: _Extensions) -> tuple[Profile, ...]:
    profiles = [Profile(name=name, prompt=text) for name, text in ext.test_prompts.items()]
    profiles += [
        Profile(name=name, **{k: getattr(raw, k) for k in type(raw).model_fields}) for name, raw in ext.workload.items()
    ]
    names = [p.name for p in profiles]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"profile names {sorted(duplicates)} appear in both test_prompts and workload; rename one")
    return tuple(profiles) or (Profile(name="default", prompt=DEFAULT_PROMPT),)


def _from_json(file: Path, raw_bytes: bytes, cfg: _JsonConfig) -> TestConfig:
    request = cfg.request or RequestSettings(max_tokens=cfg.benchmark.max_tokens, temperature=cfg.benchmark.temperature)
    return TestConfig(
        source=str(file),
        sha256=hashlib.sha256(raw_bytes).hexdigest(),
        provider=None,
        models=_targets(cfg.models, cfg.base_url, cfg.api_key_env),
        profiles=_profiles(cfg),
        request=request,
        repeat=cfg.benchmark.repeat,
        slo=cfg.slo,
        shape=cfg.shape,
        stage_duration_s=cfg.stage_duration_s,
        arrivals=cfg.arrivals,
        seed=cfg.seed,
    )


def _from_toml(file: Path, raw_bytes: bytes, cfg: _TomlConfig) -> TestConfig:
    req = cfg.request
    settings: dict[str, Any] = {
        "max_tokens": req.max_tokens,
        "temperature": req.temperature,
        "ignore_eos": req.ignore_eos,
        "unique_salt": req.unique_salt,
        "stream": req.stream,
    }
    for name in (
        "connect_timeout_s",
        "ttft_timeout_s",
        "idle_timeout_s",
        "retry_after_max_s",
        "connect_backoff_s",
        "connect_backoff_max_s",
    ):
        if getattr(req, name) is not None:
            settings[name] = getattr(req, name)
    if req.timeout is not None:
        settings["total_timeout_s"] = req.timeout  # the seed's `timeout` bounds the whole request
    return TestConfig(
        source=str(file),
        sha256=hashlib.sha256(raw_bytes).hexdigest(),
        provider=cfg.provider.name,
        models=_targets(cfg.models, cfg.provider.base_url, cfg.provider.api_key_env),
        profiles=_profiles(cfg),
        request=RequestSettings(**settings),
        repeat=cfg.benchmark.repeat if cfg.benchmark else 5,
        slo=cfg.slo,
        shape=cfg.shape,
        stage_duration_s=cfg.stage_duration_s,
        arrivals=cfg.arrivals,
        seed=cfg.seed,
    )
