"""Config loading: both seed files unchanged, strict validation, keys only from the environment."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attnload.config.load import load_config
from attnload.config.urls import resolve_chat_url
from attnload.errors import UsageError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_seed_json_loads_unchanged() -> None:
    config = load_config(EXAMPLES / "benchmark_config.json")
    assert [(m.key, m.id, m.attention, m.max_context) for m in config.models] == [
        ("gqa_model", "llama-3-70b", "GQA", 8192),
        ("mla_model", "deepseek-chat", "MLA", 65536),
    ]
    assert [p.name for p in config.profiles] == ["short", "long"]
    assert config.request.max_tokens == 256 and config.request.temperature == 0 and config.repeat == 5
    assert config.models[0].url == "https://taotoken.net/api/v1/chat/completions"
    assert config.models[0].api_key_env == "TAOTOKEN_API_KEY"


def test_seed_toml_loads_unchanged_and_timeout_is_total() -> None:
    config = load_config(EXAMPLES / "taotoken_config.toml")
    assert config.provider == "taotoken"
    assert [(m.key, m.id, m.attention, m.max_context) for m in config.models] == [
        ("gqa", "llama-3-70b", "GQA", 8192),
        ("mla", "deepseek-chat", "MLA", 65536),
    ]
    assert config.request.total_timeout_s == 120 and config.request.max_tokens == 256


def test_both_formats_normalise_to_the_same_targets() -> None:
    from_json = load_config(EXAMPLES / "benchmark_config.json")
    from_toml = load_config(EXAMPLES / "taotoken_config.toml")
    assert [(m.id, m.attention, m.url) for m in from_json.models] == [
        (m.id, m.attention, m.url) for m in from_toml.models
    ]


@pytest.mark.parametrize(
    ("base", "chat_url"),
    [
        ("https://taotoken.net/api", "https://taotoken.net/api/v1/chat/completions"),
        ("https://taotoken.net/api/", "https://taotoken.net/api/v1/chat/completions"),
        ("https://taotoken.net/api/v1", "https://taotoken.net/api/v1/chat/completions"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1/chat/completions"),
        ("http://h/api/v1/chat/completions", "http://h/api/v1/chat/completions"),
    ],
)
def test_base_url_never_doubles_v1(base: str, chat_url: str) -> None:
    _, resolved, note = resolve_chat_url(base)
    assert resolved == chat_url
    assert "/v1/v1" not in resolved and note


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("c.json", '{"base_url": "http://x/api",\n "models": {"a": {"id": "m",}}}', "c.json:2:"),
        ("c.toml", '[provider]\nbase_url = "http://x/api"\n[models.a\nid = "m"', "invalid TOML"),
        (
            "c.json",
            '{"base_url": "http://x/api", "models": {"a": {"id": "m", "attention_type": "XQA"}}}',
            "unknown attention type 'XQA'; valid: GQA, MLA, GTA, GLA, MHA, MQA",
        ),
        (
            "c.json",
            '{"base_url": "http://x/api", "models": {"a": {"id": "m", "attention_typo": "GQA"}}}',
            "models.a.attention_typo: unknown key",
        ),
        ("c.json", '{"base_url": "http://x/api", "modles": {}}', "modles"),
        ("c.json", '{"base_url": "ftp://x", "models": {"a": {"id": "m", "attention_type": "GQA"}}}', "http://"),
        ("c.yaml", "base_url: x", "use a .json or .toml file"),
    ],
)
def test_bad_files_give_one_line(tmp_path: Path, name: str, text: str, expected: str) -> None:
    with pytest.raises(UsageError) as error:
        load_config(write(tmp_path, name, text))
    message = str(error.value)
    assert expected in message and "\n" not in message


def test_missing_file_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not found: pass -c"):
        load_config(tmp_path / "nope.json")


@pytest.mark.parametrize(
    "text",
    [
        '{"base_url": "http://x/api", "api_key": "sk-abcdef123456", '
        '"models": {"a": {"id": "m", "attention_type": "GQA"}}}',
        '{"base_url": "http://x/api", "api_key_env": "sk-abcdef123456", '
        '"models": {"a": {"id": "m", "attention_type": "GQA"}}}',
    ],
)
def test_literal_key_is_refused_without_echoing_it(tmp_path: Path, text: str) -> None:
    with pytest.raises(UsageError) as error:
        load_config(write(tmp_path, "c.json", text))
    assert "sk-abcdef123456" not in str(error.value)
    assert "env" in str(error.value)


def test_literal_key_in_toml_provider_is_refused(tmp_path: Path) -> None:
    text = (EXAMPLES / "taotoken_config.toml").read_text().replace('name = "taotoken"', 'api_key = "sk-123456789x"')
    with pytest.raises(UsageError, match="provider.api_key holds a literal API key"):
        load_config(write(tmp_path, "c.toml", text))


def test_key_comes_from_env_and_missing_env_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(shutil.copy(EXAMPLES / "benchmark_config.json", tmp_path / "c.json"))
    monkeypatch.delenv("TAOTOKEN_API_KEY", raising=False)
    with pytest.raises(UsageError, match="TAOTOKEN_API_KEY is not set"):
        config.models[0].api_key()
    monkeypatch.setenv("TAOTOKEN_API_KEY", "sk-from-env-123")
    assert config.models[0].api_key() == "sk-from-env-123"


def test_per_model_overrides_and_profiles(tmp_path: Path) -> None:
    data = {
        "base_url": "http://gw/api",
        "api_key_env": "K1",
        "models": {
            "a": {"id": "m1", "attention_type": "gqa", "base_url": "http://other/v1", "api_key_env": "K2"},
            "b": {"id": "m2", "attention_type": "MLA"},
        },
        "workload": {"long": {"prompt_tokens": 8192, "max_tokens": 64}},
        "slo": {"ttft_p99_s": 2.0},
    }
    config = load_config(write(tmp_path, "c.json", json.dumps(data)))
    a, b = config.models
    assert (a.attention, a.url, a.api_key_env) == ("GQA", "http://other/v1/chat/completions", "K2")
    assert (b.url, b.api_key_env) == ("http://gw/api/v1/chat/completions", "K1")
    assert config.profile("long").prompt_tokens == 8192 and config.slo.is_set


def test_config_is_immutable() -> None:
    config = load_config(EXAMPLES / "benchmark_config.json")
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on frozen models
        config.models[0].id = "other"  # type: ignore[misc]
