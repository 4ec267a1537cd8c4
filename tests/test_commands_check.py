"""``attnload check`` against the hostile server: each seed troubleshooting case gets its verdict and fix."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attnload.commands.cli import main
from hostile_server import HostileServer, Timing

KEY_ENV = "ATTNLOAD_CHECK_TEST_KEY"
KEY = "sk-check-sentinel-5d1e9b7a42c3"
CREDENTIAL_VARS = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
)


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    hostile = HostileServer(Timing(delay_s=0.0, slow_s=2.0, stall_s=5.0))
    yield hostile
    hostile.stop()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", *CREDENTIAL_VARS):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv(KEY_ENV, KEY)


def write(tmp_path: Path, base_url: str, models: dict[str, str], **request: Any) -> Path:
    data = {
        "base_url": base_url,
        "api_key_env": KEY_ENV,
        "models": {key: {"id": model, "attention_type": "MLA"} for key, model in models.items()},
        "request": {"ttft_timeout_s": 0.5, "idle_timeout_s": 0.5, "total_timeout_s": 3.0, **request},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def check(capsys: pytest.CaptureFixture[str], config: Path, *extra: str) -> tuple[int, str]:
    code = main(["check", "-c", str(config), *extra])
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert KEY not in output  # the key never appears; its length and last 4 characters may
    return code, output


def test_ok_prints_url_key_summary_ttft_and_tokens(
    server: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = check(capsys, write(tmp_path, server.url + "/api", {"mla_model": "ok"}))
    assert code == 0, out
    assert f"{server.url}/api/v1/chat/completions" in out and f"base_url {server.url}/api/v1" in out
    assert f"{KEY_ENV} set, {len(KEY)} chars, ends …{KEY[-4:]}" in out
    assert "verdict: OK (TTFT" in out and "4 tokens" in out and "1 of 1 models passed" in out


# (model id, base path, extra env, expected verdict, fix text that must appear)
SEED_CASES = [
    (
        "auth",
        "/api",
        {},
        "auth",
        f"check the key in ${KEY_ENV} ({len(KEY)} chars, ends …{KEY[-4:]}): copy it complete with no spaces",
    ),
    ("auth", "/api", {"ANTHROPIC_AUTH_TOKEN": "oauth-leftover-token-123"}, "auth", "clear ~/.claude/ caches"),
    ("deepseek-chaat", "/api", {}, "not_found", "model id 'deepseek-chaat' is not in the provider's model list"),
    ("ok", "/api/v1/v1", {}, "not_found", "drop the extra /v1 from base_url"),
    ("ok", "/wrong", {}, "not_found", "set base_url to the API root"),
    ("no_choices", "/api", {}, "bad_response", "reading choices failed"),
    ("malformed", "/api", {}, "bad_response", "not an OpenAI chat completion"),
    ("quota", "/api", {}, "quota", "out of quota or balance"),
    ("slow_first_byte", "/api", {}, "timeout", "raise [request] ttft_timeout_s (now 0.5 s"),
    ("stall", "/api", {}, "timeout", "raise [request] idle_timeout_s (now 0.5 s"),
    ("early_length", "/api", {}, "truncated", "raise max_tokens (this check asked for 16"),
    ("no_done", "/api", {}, "truncated", "ended without [DONE]"),
    ("context_length", "/api", {}, "context_length", "context window"),
    ("rate_limited", "/api", {}, "rate_limited", "lower --users"),
    ("html_503", "/api", {}, "server", "5xx"),
    ("error_event", "/api", {}, "server", "5xx"),
    ("reset", "/api", {}, "connection", "was reset mid-request"),
]


@pytest.mark.parametrize(
    ("model", "base", "env", "verdict", "fix"), SEED_CASES, ids=[f"{c[0]}{c[1]}-{c[3]}" for c in SEED_CASES]
)
def test_seed_troubleshooting_cases(
    server: HostileServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    base: str,
    env: dict[str, str],
    verdict: str,
    fix: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, out = check(capsys, write(tmp_path, server.url + base, {"m": model}))
    assert code == 1
    assert f"verdict: FAILED {verdict}:" in out, out
    assert fix in out, out
    for value in env.values():
        assert value not in out  # leftover credentials are named, never shown


def test_base_url_with_v1_is_normalised_and_said(
    server: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The seed's `/api` vs `/api/v1` trap: both work; check says which URL it used and how to tidy it."""
    code, out = check(capsys, write(tmp_path, server.url + "/api/v1", {"m": "ok"}))
    assert code == 0, out
    assert f"used {server.url}/api/v1/chat/completions (not /v1/v1)" in out
    assert "drop the trailing /v1 from base_url" in out and "verdict: OK" in out


def test_dead_proxy_variable_is_the_proxy_class(
    server: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed's "local proxy failed": HTTP_PROXY points at a dead port."""
    dead = _dead_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{dead}")
    code, out = check(capsys, write(tmp_path, server.url + "/api", {"m": "ok"}))
    assert code == 1
    assert f"HTTP_PROXY=http://127.0.0.1:{dead} (UNREACHABLE)" in out
    assert "verdict: FAILED proxy:" in out and "fix:     unset HTTP_PROXY" in out, out


def test_no_proxy_bypass_passes(
    server: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{_dead_port()}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    code, out = check(capsys, write(tmp_path, server.url + "/api", {"m": "ok"}))
    assert code == 0, out
    assert "proxy variables: HTTP_PROXY=" in out and "none applies" in out


def test_refused_connection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(capsys, write(tmp_path, f"http://127.0.0.1:{_dead_port()}/api", {"m": "ok"}))
    assert code == 1 and "verdict: FAILED connection:" in out and "nothing accepted the connection" in out


def test_missing_key_env_and_whitespace_key(
    server: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV)
    code, out = check(capsys, write(tmp_path, server.url + "/api", {"m": "ok"}))
    assert code == 1 and f"{KEY_ENV} is NOT set" in out and f"export {KEY_ENV}=<your key>" in out
    monkeypatch.setenv(KEY_ENV, KEY + " ")
    code, out = check(capsys, write(tmp_path, server.url + "/api", {"m": "auth"}))
    assert code == 1 and "has leading or trailing whitespace" in out


def test_json_output_and_exit_status(server: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path, server.url + "/api", {"good": "ok", "bad": "auth"})
    code, out = check(capsys, config, "--json")
    data = json.loads(out)
    assert code == 1 and data["schema"] == "attnload.check/v1" and data["ok"] is False
    by_key = {m["key"]: m for m in data["models"]}
    assert by_key["good"]["verdict"] == "ok" and by_key["good"]["sdk"]["tokens"] == 4
    assert by_key["good"]["sdk"]["ttft_s"] > 0 and by_key["good"]["raw"]["ok"] is True
    assert by_key["bad"]["verdict"] == "auth" and "no spaces" in by_key["bad"]["fix"]
    assert by_key["bad"]["api_key"] == {
        "env": KEY_ENV,
        "set": True,
        "length": len(KEY),
        "last4": KEY[-4:],
        "problems": [],
    }
    code, out = check(capsys, config, "--json", "--model", "good")
    assert code == 0 and [m["key"] for m in json.loads(out)["models"]] == ["good"]


def test_unknown_model_key_is_a_usage_error(
    server: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = check(capsys, write(tmp_path, server.url + "/api", {"m": "ok"}), "--model", "nope")
    assert code == 2 and "unknown model key 'nope'" in out and len(out.strip().splitlines()) == 1


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_slow_first_request_is_named_as_a_warm_up(
    server: HostileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first request over 10 s and the next under 1 s (LiteLLM offline looking for a tokenizer): said, with the
    offline variables. The 10 s are scaled down to 0.3 s here; the SDK probe (the first request) is held 0.4 s."""
    import attnload.commands.check as check_module
    import attnload.commands.check_probes as probes

    monkeypatch.setattr(probes, "SLOW_FIRST_S", 0.3)
    original = check_module.sdk_probe

    def slow_sdk_probe(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.4)
        return original(*args, **kwargs)

    monkeypatch.setattr(check_module, "sdk_probe", slow_sdk_probe)
    code, out = check(capsys, write(tmp_path, server.url + "/api", {"mla_model": "ok"}))
    assert code == 0, out
    assert "the first request was slow: a gateway or server warming up" in out and "HF_HUB_OFFLINE=1" in out
    monkeypatch.setattr(check_module, "sdk_probe", original)
    code, out = check(capsys, write(tmp_path, server.url + "/api", {"mla_model": "ok"}))
    assert "first request was slow" not in out
