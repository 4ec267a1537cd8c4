"""What every API object (``attnload.apis``) is, and the helpers their stream readers share.

An :class:`Api` answers, for one wire protocol, everything that differs between protocols:
where a request goes (given the model: an API may put it in the path), how it authenticates,
the request body built from the neutral chat-shaped workload, how the answer streams back
(``event``, ``unary``, and the event that ends a complete stream), where the prompt sits in a
body (for the token estimate) and how the API words its errors. The client, config and the
check command hold an ``Api`` and never branch on an API's name.

Stream readers work on the stream object the client hands them (``PyStream``/``CStream``,
client/stream.py): ``_answer`` and ``_reasoning`` time a chunk, ``usage`` is kept in chat's
shape (``prompt_tokens``, ``completion_tokens``, ``..._details``), ``finish_reason`` is
``"length"`` when the output limit ended the answer, ``done`` marks a complete stream. An
error event is raised as :class:`ErrorEvent`; the client classes it (client/classify.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from attnload.errors import ErrorClass, RequestFailed
from attnload.measure.tokens import chunk_tokens

Stream = Any
"""A ``PyStream`` or ``CStream`` (client/stream.py, which imports this package)."""

MESSAGES = "messages"
"""The chat-shaped list of ``{role, content}`` a workload is written as (chat's and Messages' body field,
a JSONL dataset's key)."""
LENGTH_STOPS = ("length", "max_tokens", "max_output_tokens", "MAX_TOKENS")
"""How the APIs say the output limit ended the answer."""


class ErrorEvent(Exception):
    """An error reported inside a stream or a 200 body; the client classes ``error`` (client/classify.py)."""

    def __init__(self, error: object) -> None:
        super().__init__("error event")
        self.error = error


class Api:
    """One API: the defaults are OpenAI's (Bearer key, ``/v1/...`` paths, ``stream``, ``max_tokens``)."""

    name = ""
    """The model key ``api`` that selects it (set by the registration, ``attnload.apis``)."""
    end = "[DONE]"
    """The event that ends a complete stream (named in the ``truncated`` message)."""
    path_tail = "/chat/completions"
    """The path after ``/v1`` (``path`` below); an API whose path names the model overrides ``path``."""
    needs_key = False
    """True: a model of this API without ``api_key_env`` is refused at load (the API refuses keyless calls)."""
    reasoning_as_text = False
    """True: the API has no reasoning channel, so reasoning arrives as answer text."""

    def path(self, model_id: str) -> str:
        """The request's path from the gateway root (its first segment is the API's version)."""
        return "/v1" + self.path_tail

    def headers(self, api_key: str | None, key_header: str | None = None) -> str:
        """The authentication header lines (``\\r\\n``-terminated); ``key_header`` (the model key ``auth_header``,
        e.g. Azure OpenAI's ``api-key``) carries the key bare instead of the API's own header."""
        if not api_key:
            return ""
        return f"{key_header}: {api_key}\r\n" if key_header else f"Authorization: Bearer {api_key}\r\n"

    def body(
        self,
        model_id: str,
        messages: Sequence[dict[str, Any]],
        *,
        max_tokens: int,
        temperature: float,
        stream: bool = True,
        ignore_eos: bool = False,
        tools: Sequence[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
    ) -> dict[str, Any]:
        """The body asking for the same work as the chat body of ``messages``; an agent step adds ``tools``."""
        body: dict[str, Any] = {"model": model_id}
        body.update(self.prompt_fields(messages, max_tokens))
        body["temperature"] = temperature
        body["stream"] = stream
        if stream and self.asks_usage():
            body["stream_options"] = {"include_usage": True}
        if ignore_eos:  # vLLM/SGLang extensions
            body["ignore_eos"] = True
            body["min_tokens"] = max_tokens
        if tools is not None:
            body["tools"] = list(tools)
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
        return body

    def prompt_fields(self, messages: Sequence[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
        """The prompt and the output limit, in this API's fields."""
        return {MESSAGES: list(messages), "max_tokens": max_tokens}

    def asks_usage(self) -> bool:
        """Whether a streamed request must ask for usage (``stream_options.include_usage``)."""
        return False

    def streams(self, body: Mapping[str, Any]) -> bool:
        return bool(body.get("stream", True))

    def max_tokens(self, body: Mapping[str, Any]) -> int:
        """The output limit a body asks for (0: none)."""
        value = body.get("max_tokens") or body.get("max_completion_tokens") or body.get("max_output_tokens") or 0
        return int(value) if isinstance(value, int) else 0

    def prompt_messages(self, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The prompt of a body as chat messages (what the token estimator counts)."""
        messages = body.get(MESSAGES)
        return [m for m in messages if isinstance(m, Mapping)] if isinstance(messages, list) else []

    def event(self, stream: Stream, kind: bytes, data: bytes, at: float) -> None:
        """One SSE event the client's same-bytes check did not take."""
        raise NotImplementedError

    def unary(self, stream: Stream, data: dict[str, Any]) -> None:
        """A non-streamed 200 body (already checked for an error object)."""
        raise NotImplementedError

    def error_class(self, status: int, error: Mapping[str, Any], message: str) -> ErrorClass | None:
        """This API's own reading of an error object (None: the generic wording rules decide)."""
        return None


def load_event(kind: bytes, data: bytes) -> dict[str, Any]:
    """One event's JSON object; an error event (of any API) raised as :class:`ErrorEvent`."""
    try:
        chunk = json.loads(data)
    except ValueError:
        if kind == b"error":
            raise ErrorEvent(data[:300].decode("utf-8", errors="replace")) from None
        raise RequestFailed(ErrorClass.BAD_RESPONSE, f"malformed JSON in stream: {data[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise RequestFailed(ErrorClass.BAD_RESPONSE, f"stream chunk is not an object: {data[:80]!r}")
    if kind == b"error" or chunk.get("type") == "error" or chunk.get("error"):
        raise ErrorEvent(chunk.get("error") or chunk)
    return chunk


def text_of(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def detail(details: object, name: str) -> int | None:
    return count(details.get(name)) if isinstance(details, dict) else None


def chat_usage(prompt: object, completion: object, cached: object, reasoning: object) -> dict[str, Any]:
    """Usage in chat's shape, with only what the server reported (absent stays absent)."""
    usage: dict[str, Any] = {}
    if prompt is not None:
        usage["prompt_tokens"] = prompt
    if completion is not None:
        usage["completion_tokens"] = completion
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def stop_reason(reason: object) -> str | None:
    """A stop reason in chat's words: ``length`` for the output limit, else the API's own."""
    if not isinstance(reason, str) or not reason:
        return None
    return "length" if reason in LENGTH_STOPS else reason


def unary_parts(stream: Stream, reasoning: list[str], answer: list[str]) -> None:
    """A non-streamed answer: one stamp at its arrival, reasoning counted apart."""
    at = time.perf_counter()
    text = "".join(answer)
    thought = "".join(reasoning)
    stream.first_at = at
    stream.reasoning_tokens = chunk_tokens(thought) if thought else 0
    stream.chunk_tokens = [t for t in (stream.reasoning_tokens, chunk_tokens(text) if text else 0) if t]
    if text:
        stream.answer_at = at
        if stream.texts is not None:
            stream.texts.append(text)
