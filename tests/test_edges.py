"""The request as real endpoints need it, byte for byte: query strings kept, the key in the header the model
names, IPv6 hosts bracketed, the proxy's login on the wire but never in text; and which failures back off."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from attnload.client.backoff import Backoff
from attnload.client.chat import ApiClient
from attnload.client.classify import classify_status
from attnload.client.proxy import proxy_refusal
from attnload.client.transport import Endpoint, Timeouts
from attnload.config.load import load_config
from attnload.config.urls import api_url, resolve_chat_url
from attnload.errors import ErrorClass, RequestFailed, UsageError, redact

AZURE = "https://res.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"


def _head(client: ApiClient) -> str:
    return client._head.decode()


@pytest.mark.parametrize(
    ("base", "chat"),
    [
        ("http://h:1/v1?api-version=2024-10-21", "http://h:1/v1/chat/completions?api-version=2024-10-21"),
        ("http://h:1/api?a=1&b=2", "http://h:1/api/v1/chat/completions?a=1&b=2"),
        (AZURE, AZURE),
    ],
)
def test_a_query_string_survives_resolution_and_every_api(base: str, chat: str) -> None:
    root, resolved, _note = resolve_chat_url(base)
    assert resolved == chat and "?" not in root
    query = chat[chat.index("?") :]
    for api in ("completions", "responses", "messages"):
        assert api_url(resolved, api, "m").endswith(f"/{api}{query}")
    gemini = api_url(resolved, "gemini", "gem-1")  # its own query first, the base's after it
    assert gemini.endswith(f"/v1beta/models/gem-1:streamGenerateContent?alt=sse&{query[1:]}"), gemini


def test_the_request_line_carries_the_query_and_the_key_goes_in_the_named_header() -> None:
    client = ApiClient(AZURE, "azure-key-123456", Timeouts(), key_header="api-key")
    head = _head(client)
    assert head.startswith("POST /openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21 HTTP/1.1\r\n")
    assert "\r\napi-key: azure-key-123456\r\n" in head and "Authorization" not in head
    messages = ApiClient("http://h:1/v1/messages", "k-123456", Timeouts(), api="messages", key_header="api-key")
    assert "api-key: k-123456\r\n" in _head(messages) and "anthropic-version:" in _head(messages)
    assert "x-api-key" not in _head(messages)
    bearer = ApiClient("http://h:1/v1/chat/completions", "k-123456", Timeouts())
    assert "Authorization: Bearer k-123456\r\n" in _head(bearer)


def _config_file(directory: Path, base_url: str, model: dict[str, str]) -> Path:
    path = directory / "c.json"
    path.write_text(json.dumps({"base_url": base_url, "models": {"m": {"id": "x", "attention_type": "GQA", **model}}}))
    return path


def test_auth_header_is_a_model_key_checked_as_a_header_name(tmp_path: Path) -> None:
    config = load_config(_config_file(tmp_path, "http://h:1/v1?api-version=1", {"auth_header": "api-key"}))
    assert config.models[0].auth_header == "api-key"
    assert config.models[0].url == "http://h:1/v1/chat/completions?api-version=1"
    with pytest.raises(UsageError, match="auth_header .* is not an HTTP header name"):
        load_config(_config_file(tmp_path, "http://h:1/v1", {"auth_header": "api key: x"}))


@pytest.mark.parametrize(
    ("url", "host", "authority"),
    [
        ("http://[::1]:8000/v1/chat/completions", "[::1]:8000", "[::1]:8000"),
        ("http://[::1]/v1/chat/completions", "[::1]", "[::1]:80"),
        ("https://[2001:db8::5]/v1/chat/completions", "[2001:db8::5]", "[2001:db8::5]:443"),
        ("http://10.0.0.1:8000/v1/chat/completions", "10.0.0.1:8000", "10.0.0.1:8000"),
    ],
)
def test_an_ipv6_literal_is_bracketed_in_host_and_connect(url: str, host: str, authority: str) -> None:
    endpoint = Endpoint.from_url(url)
    assert (endpoint.host_header, endpoint.authority) == (host, authority)
    assert f"\r\nHost: {host}\r\n" in _head(ApiClient(url, None, Timeouts()))


def test_the_proxy_login_rides_on_plain_http_proxying_and_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://alice:p%40ss-w0rd-1@proxy.example:3128")
    monkeypatch.setenv("HTTPS_PROXY", "http://alice:p%40ss-w0rd-1@proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    plain = ApiClient("http://api.example/v1/chat/completions?v=1", None, Timeouts())
    token = base64.b64encode(b"alice:p@ss-w0rd-1").decode()
    assert _head(plain).startswith("POST http://api.example/v1/chat/completions?v=1 HTTP/1.1\r\n")
    assert f"Proxy-Authorization: Basic {token}\r\n" in _head(plain)
    assert plain.endpoint.proxy == ("proxy.example", 3128)
    assert "p@ss" not in repr(plain.endpoint) and token not in repr(plain.endpoint)
    tls = ApiClient("https://api.example/v1/chat/completions", None, Timeouts())
    assert "Proxy-Authorization" not in _head(tls)  # through CONNECT only: the server never sees it
    assert tls.endpoint.proxy_auth == f"Proxy-Authorization: Basic {token}\r\n"
    assert "p@ss-w0rd-1" not in redact("proxy said p@ss-w0rd-1 and " + token)
    direct = ApiClient("http://127.0.0.1:9/v1/chat/completions", None, Timeouts())
    assert direct.endpoint.proxy is None and "Proxy-Authorization" not in _head(direct)


def test_407_and_a_proxys_own_401_are_proxy_auth() -> None:
    assert classify_status(407, b"<title>407 Proxy Authentication Required</title>").kind is ErrorClass.PROXY_AUTH
    tinyproxy = classify_status(401, b"<html><title>401 Unauthorized</title></html>")
    challenge = {"www-authenticate": 'Basic realm="Tinyproxy"'}.get
    assert proxy_refusal(tinyproxy, True, challenge).kind is ErrorClass.PROXY_AUTH
    assert proxy_refusal(tinyproxy, False, challenge).kind is ErrorClass.AUTH  # no proxy in the way
    server = {"www-authenticate": 'Bearer realm="OpenAI"'}.get
    assert proxy_refusal(tinyproxy, True, server).kind is ErrorClass.AUTH  # the server's own 401 through a proxy


@pytest.mark.parametrize("kind", ["not_found", "auth", "bad_request", "context_length", "proxy_auth"])
def test_deterministic_failures_back_off_even_after_a_success(kind: str) -> None:
    backoff = Backoff(0.1, 5.0, rng=lambda: 1.0)
    backoff.after(None, True)
    backoff.after(ErrorClass.from_label(kind), True)
    assert backoff.failures == 1 and backoff.wait_s() > 0.05


def test_before_any_success_every_failure_backs_off_after_it_only_unanswered_ones() -> None:
    backoff = Backoff(0.1, 5.0, rng=lambda: 1.0)
    backoff.after(ErrorClass.SERVER, True)  # a 500 before anything worked: wait
    backoff.after(ErrorClass.RATE_LIMITED, True)
    assert backoff.failures == 2
    backoff.after(None, True)
    assert backoff.failures == 0
    backoff.after(ErrorClass.SERVER, True)  # the endpoint has worked: a 5xx resets, as before
    backoff.after(ErrorClass.CANCELLED, False)
    assert backoff.failures == 0
    backoff.after(ErrorClass.CONNECTION, False)
    backoff.after(ErrorClass.PROXY, False)
    assert backoff.failures == 2


def test_a_refused_connect_is_proxy_auth() -> None:
    failure = RequestFailed(ErrorClass.PROXY_AUTH, "proxy refused CONNECT: HTTP/1.0 407 Proxy Authentication Required")
    assert "Fix: the proxy refused its login" in str(failure)
