"""The model key ``api``: request bodies, each API's stream grammar (pure Python against compiled), error
bodies, config validation, and reasoning timed apart (TTFAT, reasoning tokens) against the simulator."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnload import native
from attnload.apis import api_of, request_body
from attnload.client import stream as streams
from attnload.client.chat import ApiClient, chat_body
from attnload.client.classify import classify_status
from attnload.client.transport import Timeouts
from attnload.commands.cli import main
from attnload.config.load import load_config
from attnload.config.urls import api_url, resolve_chat_url
from attnload.errors import ErrorClass, RequestFailed, UsageError
from helpers import Processes, http_json, start_sim
from hostile_server import HostileServer, Timing

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
APIS = ("chat", "completions", "responses", "messages", "gemini")
UNARY_APIS = APIS[:4]
"""Gemini's requests go to ``streamGenerateContent``: its answers always stream."""


# --------------------------------------------------------------------------- bodies and headers


def test_chat_body_is_unchanged_by_the_api_key() -> None:
    """The chat body as it always was, byte for byte: model, messages, max_tokens, temperature, stream, usage."""
    for ignore_eos in (False, True):
        for stream in (False, True):
            kwargs: dict[str, Any] = {"max_tokens": 7, "temperature": 0.5, "stream": stream, "ignore_eos": ignore_eos}
            expected: dict[str, Any] = {
                "model": "m",
                "messages": MESSAGES,
                "max_tokens": 7,
                "temperature": 0.5,
                "stream": stream,
            }
            if stream:
                expected["stream_options"] = {"include_usage": True}
            if ignore_eos:
                expected |= {"ignore_eos": True, "min_tokens": 7}
            assert json.dumps(request_body("chat", "m", MESSAGES, **kwargs)) == json.dumps(expected)
            assert json.dumps(chat_body("m", MESSAGES, **kwargs)) == json.dumps(expected)


def test_each_api_names_its_prompt_and_limit() -> None:
    completions = request_body("completions", "m", MESSAGES, max_tokens=7, temperature=0)
    assert completions["prompt"] == "be brief\n\nhello there" and completions["max_tokens"] == 7
    assert completions["stream_options"] == {"include_usage": True}
    responses = request_body("responses", "m", MESSAGES, max_tokens=7, temperature=0)
    assert responses["input"] == MESSAGES and responses["max_output_tokens"] == 7 and "stream_options" not in responses
    messages = request_body("messages", "m", MESSAGES, max_tokens=7, temperature=0, ignore_eos=True)
    assert messages["system"] == "be brief" and messages["messages"] == MESSAGES[1:]
    assert messages["max_tokens"] == 7 and "ignore_eos" not in messages and "stream_options" not in messages
    assert api_of("messages").headers("k") == "x-api-key: k\r\nanthropic-version: 2023-06-01\r\n"
    assert api_of("responses").headers("k") == "Authorization: Bearer k\r\n"
    assert api_url("http://h/api/v1/chat/completions", "messages", "m") == "http://h/api/v1/messages"
    for base in ("https://g.example", "https://g.example/v1beta", "https://g.example/v1beta/", "https://g.example/v1"):
        url = api_url(resolve_chat_url(base)[1], "gemini", "gemini-2.5-flash")
        assert url == "https://g.example/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", base
    gemini = request_body("gemini", "g", MESSAGES, max_tokens=7, temperature=0.5)
    assert gemini == {
        "contents": [{"role": "user", "parts": [{"text": "hello there"}]}],
        "generationConfig": {"maxOutputTokens": 7, "temperature": 0.5},
        "systemInstruction": {"parts": [{"text": "be brief"}]},
    }
    assert api_of("gemini").headers("k") == "x-goog-api-key: k\r\n"


# --------------------------------------------------------------------------- error bodies


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}, "auth"),
        (404, {"type": "error", "error": {"type": "not_found_error", "message": "model: nope"}}, "not_found"),
        (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}, "rate_limited"),
        (
            400,
            {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 9 > 8"}},
            "context_length",
        ),
        (401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}, "auth"),
        (404, {"error": {"message": "The model `x` does not exist.", "code": "model_not_found"}}, "not_found"),
        (429, {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}, "rate"),
        (
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 8 tokens",
                    "code": "context_length_exceeded",
                }
            },
            "context_length",
        ),
    ],
)
def test_each_apis_error_bodies_class_as_for_chat(status: int, body: dict[str, Any], kind: str) -> None:
    """Anthropic's typed errors and the OpenAI shape Completions and Responses share."""
    failure = classify_status(status, json.dumps(body).encode())
    assert failure.kind.label.startswith(kind), failure


@pytest.mark.parametrize(
    ("status", "name", "message", "kind"),
    [
        (404, "NOT_FOUND", "models/nope is not found for API version v1beta", "not_found"),
        (429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).", "quota"),
        (429, "RESOURCE_EXHAUSTED", "Too many requests, slow down.", "rate_limited"),
        (403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers.", "auth"),
        (401, "UNAUTHENTICATED", "Request had invalid authentication credentials.", "auth"),
        (400, "INVALID_ARGUMENT", "The input token count (2000000) exceeds the maximum number of tokens", "context"),
        (400, "INVALID_ARGUMENT", "Invalid JSON payload received.", "bad_request"),
        (503, "UNAVAILABLE", "The model is overloaded.", "server"),
    ],
)
def test_gemini_error_bodies_class_by_their_status_name(status: int, name: str, message: str, kind: str) -> None:
    """Google's ``{"error": {code, status, message}}``: the canonical status name decides, its wording refines."""
    body = json.dumps({"error": {"code": status, "message": message, "status": name}}).encode()
    failure = classify_status(status, body, None, api_of("gemini"))
    assert failure.kind.label.startswith(kind), failure
    assert message[:20] in failure.detail


# --------------------------------------------------------------------------- config


def _config(tmp_path: Path, api: str, key: bool = True, toml: bool = False) -> Path:
    if toml:
        path = tmp_path / "c.toml"
        env = 'api_key_env = "K"\n' if key else ""
        path.write_text(
            f'[provider]\nbase_url = "http://127.0.0.1:9/api"\n{env}[models.a]\nid = "m"\nattention = "GQA"\n'
            f'api = "{api}"\n'
        )
        return path
    path = tmp_path / "c.json"
    model: dict[str, Any] = {"id": "m", "attention_type": "GQA", "api": api}
    data: dict[str, Any] = {"base_url": "http://127.0.0.1:9/v1", "models": {"a": model}}
    if key:
        data["api_key_env"] = "K"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("toml", [False, True])
def test_the_api_key_in_both_formats(tmp_path: Path, toml: bool) -> None:
    for api in UNARY_APIS:
        target = load_config(_config(tmp_path, api, toml=toml)).models[0]
        assert target.api == api and target.url.endswith("/v1/chat/completions" if api == "chat" else f"/{api}")
    gemini = load_config(_config(tmp_path, "gemini", toml=toml)).models[0]
    assert gemini.url.endswith("/v1beta/models/m:streamGenerateContent?alt=sse") and "/v1/" not in gemini.url
    with pytest.raises(UsageError, match=r"api 'chatt' is not an API attnload speaks: use one of chat, completions"):
        load_config(_config(tmp_path, "chatt", toml=toml))
    with pytest.raises(UsageError, match="api messages needs an API key") as info:
        load_config(_config(tmp_path, "messages", key=False, toml=toml))
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- grammar: pure Python = compiled


def _sse(kind: str | None, data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {kind}\n" if kind else "").encode() + b"data: " + text.encode() + b"\n\n"


TEXTS = ["the ", " quick", "", "a b  c", "é", "中文 ", 'q\\"uote', "word"]
_CMPL = '{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"'
_CHAT = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{'
POOLS: dict[str, st.SearchStrategy[bytes]] = {
    "chat": st.one_of(
        st.sampled_from(TEXTS).map(
            lambda t: b"data: " + (_CHAT + '"content":"' + t + '"},"finish_reason":null}]}').encode() + b"\n\n"
        ),
        st.sampled_from(TEXTS).map(
            lambda t: b"data: " + (_CHAT + '"reasoning":"' + t + '"},"finish_reason":null}]}').encode() + b"\n\n"
        ),
        st.sampled_from(TEXTS).map(
            lambda t: (
                b"data: " + (_CHAT + '"reasoning_content":"' + t + '"},"finish_reason":null}]}').encode() + b"\n\n"
            )
        ),
        st.just(b"data: " + (_CHAT + '"role":"assistant","content":""},"finish_reason":null}]}').encode() + b"\n\n"),
        st.just(
            _sse(
                None,
                {
                    "choices": [],
                    "usage": {
                        "prompt_tokens": 3,
                        "completion_tokens": 9,
                        "completion_tokens_details": {"reasoning_tokens": 0},
                    },
                },
            )
        ),
        st.just(b"data: [DONE]\n\n"),
    ),
    "completions": st.one_of(
        st.sampled_from(TEXTS).map(
            lambda t: (
                b"data: "
                + (_CMPL + t + '","logprobs":null,"finish_reason":null,"stop_reason":null}]}').encode()
                + b"\n\n"
            )
        ),
        st.just(_sse(None, {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})),
        st.just(_sse(None, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}})),
        st.just(b"data: [DONE]\n\n"),
        st.just(b"event: error\ndata: overloaded\n\n"),
        st.just(b": ping\n\n"),
    ),
    "responses": st.one_of(
        st.sampled_from(TEXTS).map(
            lambda t: _sse("response.output_text.delta", {"type": "response.output_text.delta", "delta": t})
        ),
        st.sampled_from(TEXTS).map(
            lambda t: _sse("response.reasoning_text.delta", {"type": "response.reasoning_text.delta", "delta": t})
        ),
        st.just(_sse("response.reasoning_summary_text.delta", {"type": "response.reasoning_summary_text.delta"})),
        st.just(_sse("response.created", {"type": "response.created", "response": {"status": "in_progress"}})),
        st.just(
            _sse(
                "response.completed",
                {
                    "type": "response.completed",
                    "response": {
                        "status": "incomplete",
                        "incomplete_details": {"reason": "max_output_tokens"},
                        "usage": {
                            "input_tokens": 3,
                            "output_tokens": 9,
                            "output_tokens_details": {"reasoning_tokens": 4},
                        },
                    },
                },
            )
        ),
        st.just(_sse("error", {"type": "error", "code": "server_error", "message": "boom"})),
        st.just(b"data: [DONE]\n\n"),  # a gateway's terminator (LiteLLM)
    ),
    "messages": st.one_of(
        st.sampled_from(TEXTS).map(
            lambda t: _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": t}},
            )
        ),
        st.sampled_from(TEXTS).map(
            lambda t: _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": t}},
            )
        ),
        st.just(_sse("message_start", {"type": "message_start", "message": {"usage": {"input_tokens": 5}}})),
        st.just(
            _sse(
                "message_delta",
                {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}},
            )
        ),
        st.just(_sse("message_stop", {"type": "message_stop"})),
        st.just(_sse("ping", {"type": "ping"})),
        st.just(_sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})),
        st.just(b"data: [DONE]\n\n"),
    ),
    "gemini": st.one_of(
        st.tuples(st.sampled_from(TEXTS), st.booleans()).map(
            lambda tb: _sse(
                None,
                {"candidates": [{"content": {"parts": [{"text": tb[0], "thought": tb[1]}], "role": "model"}}]},
            )
        ),
        st.just(_sse(None, {"usageMetadata": {"promptTokenCount": 5}})),
        st.just(
            _sse(
                None,
                {
                    "candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "MAX_TOKENS"}],
                    "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 6, "thoughtsTokenCount": 3},
                },
            )
        ),
        st.just(_sse(None, {"error": {"code": 503, "status": "UNAVAILABLE", "message": "overloaded"}})),
    ),
}


def _run(compiled: bool, api: str, stream: bytes, cuts: list[int]) -> tuple[object, ...]:
    native.use(compiled)
    try:
        state = streams.new_stream(True, 64, api)
        assert type(state) is (streams.COMPILED_STREAM if compiled else streams.PyStream)
        state.texts = []
        failure = None
        points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
        try:
            for start, end in zip(points, points[1:], strict=False):
                state.sse.feed(stream[start:end])
                if state.sse.events:
                    state.consume(float(end), 0.0)
        except RequestFailed as exc:
            failure = (exc.kind, exc.detail)
        return (
            failure,
            state.first_at,
            list(state.gaps),
            list(state.chunk_tokens),
            state.texts,
            state.done,
            state.usage,
            state.finish_reason,
            state.answer_at,
            state.reasoning_tokens,
            state.plain_head,
        )
    finally:
        native.reset()


@pytest.mark.skipif(streams.COMPILED_STREAM is None, reason="attnload.native._fastpath is not built")
@settings(max_examples=150, deadline=None)
@given(
    api=st.sampled_from(APIS),
    data=st.data(),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=20),
)
def test_each_api_reads_identically_compiled_and_pure(api: str, data: st.DataObject, cuts: list[int]) -> None:
    stream = b"".join(data.draw(st.lists(POOLS[api], max_size=20)))
    assert _run(True, api, stream, cuts) == _run(False, api, stream, cuts)


VLLM_COMPLETION = (
    b'{"id":"cmpl-9","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,"text":" the",'
    b'"logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}'
)
"""A completions delta as vLLM 0.32 writes it (``model_dump_json(exclude_unset=True)``)."""


def test_a_gateways_done_after_the_apis_own_end_is_not_a_malformed_event() -> None:
    """LiteLLM's Responses stream ends ``response.completed`` then ``data: [DONE]``: 1 request in 72 failed
    ``bad_response`` ("malformed JSON in stream: b'[DONE]'") when both came in one read. Skipped; and a
    ``[DONE]`` without the API's own end is still a truncated stream, not a complete one."""
    delta = _sse("response.output_text.delta", {"type": "response.output_text.delta", "delta": "hi"})
    completed = _sse("response.completed", {"type": "response.completed", "response": {"status": "completed"}})
    for compiled in (False, True):
        if compiled and streams.COMPILED_STREAM is None:
            continue
        result = _run(compiled, "responses", delta + completed + b"data: [DONE]\n\n", [])
        assert result[0] is None and result[5] is True and result[4] == ["hi"], result
        cut = _run(compiled, "responses", delta + b"data: [DONE]\n\n", [])
        assert cut[0] is None and cut[5] is False, cut  # not done: finish() will call it truncated


def test_vllms_completion_delta_arms_the_same_bytes_check() -> None:
    for compiled in (False, True):
        if compiled and streams.COMPILED_STREAM is None:
            continue
        result = _run(compiled, "completions", b"data: " + VLLM_COMPLETION + b"\n\n", [])
        assert result[0] is None and result[3] == [1] and result[4] == [" the"] and result[10] is not None


def test_completions_plain_deltas_take_the_same_bytes_path() -> None:
    """After the first plain text delta, later ones are stamped without ``_event`` (in C on the compiled path)."""
    chunks = [
        b"data: " + (_CMPL + t + '","logprobs":null,"finish_reason":null,"stop_reason":null}]}').encode() + b"\n\n"
        for t in ("a ", "b ", "c ")
    ]
    for compiled in (False, True):
        if compiled and streams.COMPILED_STREAM is None:
            continue
        result = _run(
            compiled, "completions", b"".join(chunks) + b"data: [DONE]\n\n", [len(chunks[0]), 2 * len(chunks[0])]
        )
        assert result[0] is None and result[3] == [1, 1, 1] and result[8] == float(len(chunks[0]))
        assert result[10] is not None


# --------------------------------------------------------------------------- reasoning against the simulator


@pytest.mark.parametrize("api", APIS)
def test_reasoning_first_then_answer_exact_in_fixed_mode(processes: Processes, api: str) -> None:
    """``--reasoning-ratio 0.5``: half of 20 tokens are reasoning, so TTFAT − TTFT = 10 × ITL (completions has
    no reasoning field: the reasoning is text there, and TTFAT is TTFT)."""
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "30", "--itl-ms", "10", "--reasoning-ratio", "0.5")
    client = ApiClient(
        api_url(sim + "/v1/chat/completions", api, "llama-3-70b"),
        "k",
        Timeouts(connect_s=5, ttft_s=None, idle_s=10, total_s=30),
        api=api,
    )
    expected = 0 if api == "completions" else 10
    differences = []
    for _ in range(5):
        record = client.send(
            request_body(api, "llama-3-70b", MESSAGES, max_tokens=20, temperature=0),
            model_key="m",
            profile="p",
            stage=0,
        )
        assert record.outcome == "ok" and record.completion_tokens == 20 and not record.tokens_estimated
        assert record.ttft_s is not None and record.ttfat_s is not None and record.ttfat_s >= record.ttft_s
        assert record.reasoning_tokens == expected
        assert record.server_reasoning_tokens == (None if api in ("completions", "messages") else 10)
        gaps = [gap for gap, _ in record.itl_samples]
        # the answer's first token is the one after the reasoning: exactly the reasoning's gaps after TTFT
        assert record.ttfat_s - record.ttft_s == pytest.approx(sum(gaps[:expected]), abs=1e-6)
        differences.append(record.ttfat_s - record.ttft_s - expected * 0.010)
    # The median request against the schedule. The simulator's event loop wakes up to ~1.5 ms late on a
    # loaded machine (epoll's millisecond timeouts); one token early or late would be off by 10 ms.
    assert abs(statistics.median(differences)) <= 0.002, differences
    client.close()
    truth = http_json(sim + "/stats")["models"]["llama-3-70b"]
    assert truth["reasoning_tokens"] == 50 and truth["completion_tokens"] == 100


@pytest.mark.parametrize("api", UNARY_APIS)
def test_unary_answers_of_each_api(processes: Processes, api: str) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "5", "--itl-ms", "1", "--reasoning-ratio", "0.25")
    client = ApiClient(
        api_url(sim + "/v1/chat/completions", api, "llama-3-70b"), "k", Timeouts(5, None, 10, 30), api=api
    )
    body = request_body(api, "llama-3-70b", MESSAGES, max_tokens=8, temperature=0, stream=False)
    started = time.perf_counter()
    record = client.send(body, model_key="m", profile="p", stage=0, capture_text=True)
    assert record.outcome == "ok" and record.completion_tokens == 8 and record.e2e_s < time.perf_counter() - started + 1
    assert record.reasoning_tokens == (0 if api == "completions" else 2) and record.reply_text
    assert record.ttfat_s == record.ttft_s


@pytest.mark.parametrize("api", APIS)
def test_simulator_errors_in_each_apis_words(processes: Processes, api: str) -> None:
    """A wrong model is not_found and an oversized request context_length, whichever API carries it."""
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "5", "--itl-ms", "1")
    client = ApiClient(
        api_url(sim + "/v1/chat/completions", api, "llama-3-70b"), "k", Timeouts(5, None, 10, 30), api=api
    )
    stray = ApiClient(api_url(sim + "/v1/chat/completions", api, "nope"), "k", Timeouts(5, None, 10, 30), api=api)
    wrong = stray.send(
        request_body(api, "nope", MESSAGES, max_tokens=8, temperature=0), model_key="m", profile="p", stage=0
    )
    assert wrong.error == ErrorClass.NOT_FOUND.label and wrong.http_status == 404
    big = client.send(
        request_body(api, "llama-3-70b", MESSAGES, max_tokens=10_000_000, temperature=0),
        model_key="m",
        profile="p",
        stage=0,
    )
    assert big.error == ErrorClass.CONTEXT_LENGTH.label and big.http_status == 400


# --------------------------------------------------------------------------- attnload check


def _check_config(tmp_path: Path, base_url: str, api: str, model: str) -> Path:
    path = tmp_path / f"check-{api}.json"
    data = {
        "base_url": base_url,
        "api_key_env": "ATTNLOAD_CHECK_KEY",
        "models": {"m": {"id": model, "attention_type": "GQA", "api": api}},
        "request": {"total_timeout_s": 5.0},
    }
    path.write_text(json.dumps(data))
    return path


def test_check_says_which_api_it_probed(
    processes: Processes, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ATTNLOAD_CHECK_KEY", "sk-check-000000000000")
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "5", "--itl-ms", "1")
    for api in ("completions", "responses", "messages"):
        code = main(["check", "-c", str(_check_config(tmp_path, sim + "/v1", api, "llama-3-70b"))])
        out = capsys.readouterr().out
        assert code == 0, out
        assert f"api:     {api} (probed: POST /v1/{api})" in out and "verdict: OK" in out


def test_check_names_the_fix_for_a_wrong_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``messages`` against a server that speaks chat only: one line naming ``api = "chat"``."""
    monkeypatch.setenv("ATTNLOAD_CHECK_KEY", "sk-check-000000000000")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    server = HostileServer(Timing(delay_s=0.0, slow_s=2.0, stall_s=5.0))
    try:
        code = main(["check", "-c", str(_check_config(tmp_path, server.url + "/api", "messages", "ok"))])
    finally:
        server.stop()
    out = capsys.readouterr().out
    assert code == 1, out
    (fix,) = [line for line in out.splitlines() if line.strip().startswith("fix:")]
    assert 'set api = "chat" for model m' in fix and "does not speak the messages API" in fix, out


def test_chat_reasoning_then_content_on_both_paths() -> None:
    """vLLM 0.32's ``reasoning`` and older ``reasoning_content`` deltas: timed as tokens, counted apart; the first
    content delta (read at byte 300 here) is the answer's start, and later ones take the same-bytes path."""

    def chunk(field: str, text: str) -> bytes:
        return b"data: " + (_CHAT + f'"{field}":"{text}"' + '},"finish_reason":null}]}').encode() + b"\n\n"

    parts = [
        chunk("reasoning", "hmm "),
        chunk("reasoning_content", "so "),
        chunk("content", "yes "),
        chunk("content", "ok "),
    ]
    stream = b"".join(parts)
    cuts = [sum(len(p) for p in parts[: i + 1]) for i in range(len(parts))]
    for compiled in (False, True):
        if compiled and streams.COMPILED_STREAM is None:
            continue
        result = _run(compiled, "chat", stream + b"data: [DONE]\n\n", cuts)
        assert result[0] is None and result[3] == [1, 1, 1, 1] and result[4] == ["yes ", "ok "]
        assert result[8] == float(cuts[2]) and result[9] == 2 and result[1] == float(cuts[0])


def test_an_agent_profile_against_a_non_chat_api_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "agent.json"
    path.write_text(
        json.dumps(
            {
                "base_url": "http://127.0.0.1:9/v1",
                "api_key_env": "ATTNLOAD_TEST_KEY",
                "models": {"gqa_model": {"id": "m", "attention_type": "GQA", "api": "responses"}},
                "workload": {"ag": {"agent": {"steps": 3}}},
            }
        )
    )
    with pytest.raises(UsageError) as info:
        load_config(path)
    assert str(info.value) == (
        f"{path}: agent profile ag sends chat tool calls, but model gqa_model (responses) speaks another API: "
        'set api = "chat" for it, or run the agent profile against chat models only'
    )
