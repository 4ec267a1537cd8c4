"""How the answer streams back in the APIs other than chat: completions, Responses, Anthropic Messages.

Chat completions keep their own code in ``StreamChecks._event`` (client/checks.py), untouched;
a stream of another API carries a :class:`Grammar` whose ``event`` takes every event the
same-bytes check did not, with the same rules as chat: the first output token of any kind
is TTFT, every output token (reasoning included) is timed for ITL, the first answer token
is TTFAT (``answer_at``), reasoning deltas are counted apart, and the server's ``usage`` is
kept in chat's shape (``prompt_tokens``, ``completion_tokens``, ``..._details``) so the record
is built one way. Field names are those vLLM 0.32 streams (its ``entrypoints/openai`` and
``entrypoints/anthropic``), which follow OpenAI's and Anthropic's references.

Completions are framed like chat (``data:`` lines, ``[DONE]``), so their plain text deltas
set ``plain_head``/``plain_tail`` and later ones are stamped by the same-bytes check, in C
on the compiled path. Responses and Messages name each event (``event:`` lines, and the
Responses API numbers them), so every event takes this pure-Python path.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from attnload.client.checks import PLAIN_STRING, SCALAR_FIELD, cached_tokens, first_choice
from attnload.client.classify import classify_error_object
from attnload.errors import ErrorClass, RequestFailed
from attnload.measure.tokens import chunk_tokens

Stream = Any
"""A ``PyStream`` or ``CStream`` (client/stream.py, which imports this module)."""

_PLAIN_TEXT = re.compile(
    rb"\{(?:" + SCALAR_FIELD + rb',)*"choices":\[\{"index":0,"text":"(' + PLAIN_STRING + rb')"'
    rb'(?:,"logprobs":null)?(?:,"finish_reason":null)?(?:,"stop_reason":null)?'
    rb'(?:,"prompt_token_ids":null)?(?:,"token_ids":null)?\}\]'
    rb"(?:," + SCALAR_FIELD + rb")*\}"
)
"""A plain completions delta: one choice, index 0, no finish, text without escapes; ``json.loads`` of
such bytes yields no error, no usage and ``choices[0].text == group(1)`` (as ``_PLAIN_DELTA`` for chat)."""
_LENGTH_STOPS = ("length", "max_tokens", "max_output_tokens")
"""How each API says the output limit ended the answer (chat and completions, Messages, Responses)."""


class ApiGrammar:
    """One API's stream grammar (``checks.Grammar``): its events, its non-streamed body, the event that ends it."""

    __slots__ = ("api", "end", "event", "unary")

    def __init__(
        self,
        api: str,
        end: str,
        event: Callable[[Any, bytes, bytes, float], None],
        unary: Callable[[Any, dict[str, Any]], None],
    ) -> None:
        self.api = api
        self.end = end
        """The event that ends a complete stream (named in the ``truncated`` message)."""
        self.event = event
        self.unary = unary


def _load(kind: bytes, data: bytes) -> dict[str, Any]:
    """One event's JSON object; an error event (of any API) raised as its class, as for chat."""
    try:
        chunk = json.loads(data)
    except ValueError:
        if kind == b"error":
            raise classify_error_object(data[:300].decode("utf-8", errors="replace"), 200) from None
        raise RequestFailed(ErrorClass.BAD_RESPONSE, f"malformed JSON in stream: {data[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise RequestFailed(ErrorClass.BAD_RESPONSE, f"stream chunk is not an object: {data[:80]!r}")
    if kind == b"error" or chunk.get("type") == "error" or chunk.get("error"):
        raise classify_error_object(chunk.get("error") or chunk, 200)
    return chunk


def _text_of(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# --------------------------------------------------------------------------- completions


def completions_event(stream: Stream, kind: bytes, data: bytes, at: float) -> None:
    """``data: {"choices":[{"text":...}]}`` lines, a usage chunk, ``[DONE]`` (framed as chat)."""
    if kind == b"message":
        plain = _PLAIN_TEXT.fullmatch(data)
        if plain is not None and plain.group(1):
            try:
                text = plain.group(1).decode()
            except UnicodeDecodeError:
                pass  # json.loads reports it
            else:
                stream.plain_head, stream.plain_tail = data[: plain.start(1)], data[plain.end(1) :]
                stream._answer(at, cached_tokens(text), text)
                return
    if data == b"[DONE]":
        stream.done = True
        return
    choice = first_choice(stream, _load(kind, data))
    if choice is None:
        return
    text = _text_of(choice.get("text"))
    if text is not None:
        stream._answer(at, chunk_tokens(text), text)
    if choice.get("finish_reason"):
        stream.finish_reason = choice["finish_reason"]


def completions_unary(stream: Stream, data: dict[str, Any]) -> None:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise RequestFailed(ErrorClass.BAD_RESPONSE, "response has no `choices` (reading choices failed)")
    _unary_parts(stream, [], [_text_of(choices[0].get("text")) or ""])
    stream.finish_reason = choices[0].get("finish_reason")
    usage = data.get("usage")
    stream.usage = usage if isinstance(usage, dict) else None


# --------------------------------------------------------------------------- Responses


_RESPONSES_REASONING = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
_RESPONSES_END = ("response.completed", "response.incomplete")


def responses_event(stream: Stream, kind: bytes, data: bytes, at: float) -> None:
    """``response.output_text.delta``, reasoning text and summary deltas, ``response.completed`` (with usage)."""
    chunk = _load(kind, data)
    kind_name = chunk.get("type")
    if kind_name == "response.output_text.delta":
        text = _text_of(chunk.get("delta"))
        if text is not None:
            stream._answer(at, chunk_tokens(text), text)
    elif kind_name in _RESPONSES_REASONING:
        text = _text_of(chunk.get("delta"))
        if text is not None:
            stream._reasoning(at, chunk_tokens(text))
    elif kind_name in _RESPONSES_END:
        response = chunk.get("response")
        _responses_final(stream, response if isinstance(response, dict) else {})
        stream.done = True
    elif kind_name == "response.failed":
        response = chunk.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        raise classify_error_object(error or "the response failed (response.failed)", 200)


def _responses_final(stream: Stream, response: dict[str, Any]) -> None:
    """The final response object: usage in chat's shape, and whether the output limit ended it."""
    usage = response.get("usage")
    if isinstance(usage, dict):
        stream.usage = _chat_usage(
            _count(usage.get("input_tokens")),
            _count(usage.get("output_tokens")),
            _detail(usage.get("input_tokens_details"), "cached_tokens"),
            _detail(usage.get("output_tokens_details"), "reasoning_tokens"),
        )
    incomplete = response.get("incomplete_details")
    if response.get("status") == "incomplete" and isinstance(incomplete, dict):
        stream.finish_reason = "length" if incomplete.get("reason") in _LENGTH_STOPS else str(incomplete.get("reason"))


def responses_unary(stream: Stream, data: dict[str, Any]) -> None:
    output = data.get("output")
    if not isinstance(output, list):
        raise RequestFailed(ErrorClass.BAD_RESPONSE, "response has no `output` (reading the Responses body failed)")
    reasoning: list[str] = []
    answer: list[str] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        parts = [p for p in (item.get("content") or []) + (item.get("summary") or []) if isinstance(p, dict)]
        texts = [t for p in parts if (t := _text_of(p.get("text")))]
        (reasoning if item.get("type") == "reasoning" else answer).extend(texts)
    _unary_parts(stream, reasoning, answer)
    _responses_final(stream, data)


# --------------------------------------------------------------------------- Anthropic Messages


def messages_event(stream: Stream, kind: bytes, data: bytes, at: float) -> None:
    """``message_start``, ``content_block_start``/``_delta`` (text, thinking), ``message_delta``, ``message_stop``."""
    chunk = _load(kind, data)
    kind_name = chunk.get("type")
    if kind_name == "content_block_delta":
        _messages_block(stream, chunk.get("delta"), at)
    elif kind_name == "content_block_start":
        _messages_block(stream, chunk.get("content_block"), at)
    elif kind_name == "message_start":
        message = chunk.get("message")
        _messages_usage(stream, message.get("usage") if isinstance(message, dict) else None)
    elif kind_name == "message_delta":
        _messages_usage(stream, chunk.get("usage"))
        delta = chunk.get("delta")
        reason = delta.get("stop_reason") if isinstance(delta, dict) else None
        if reason:
            stream.finish_reason = "length" if reason in _LENGTH_STOPS else str(reason)
    elif kind_name == "message_stop":
        stream.done = True


def _messages_block(stream: Stream, block: object, at: float) -> None:
    """A text or thinking delta (or a block that starts with text already in it)."""
    if not isinstance(block, dict):
        return
    text = _text_of(block.get("text"))
    if text is not None:
        stream._answer(at, chunk_tokens(text), text)
        return
    thinking = _text_of(block.get("thinking"))
    if thinking is not None:
        stream._reasoning(at, chunk_tokens(thinking))


def _messages_usage(stream: Stream, usage: object) -> None:
    """Anthropic usage: ``input_tokens`` leaves out the cache's reads and writes, so they are added back."""
    if not isinstance(usage, dict):
        return
    before = stream.usage or {}
    inputs = _count(usage.get("input_tokens"))
    read = _count(usage.get("cache_read_input_tokens"))
    written = _count(usage.get("cache_creation_input_tokens")) or 0
    prompt = inputs + (read or 0) + written if inputs is not None else before.get("prompt_tokens")
    output = _count(usage.get("output_tokens"))
    stream.usage = _chat_usage(
        prompt,
        output if output is not None else before.get("completion_tokens"),
        read if read is not None else (before.get("prompt_tokens_details") or {}).get("cached_tokens"),
        None,
    )


def messages_unary(stream: Stream, data: dict[str, Any]) -> None:
    content = data.get("content")
    if not isinstance(content, list):
        raise RequestFailed(ErrorClass.BAD_RESPONSE, "response has no `content` (reading the Messages body failed)")
    blocks = [b for b in content if isinstance(b, dict)]
    _unary_parts(
        stream,
        [t for b in blocks if (t := _text_of(b.get("thinking")))],
        [t for b in blocks if (t := _text_of(b.get("text")))],
    )
    reason = data.get("stop_reason")
    stream.finish_reason = "length" if reason in _LENGTH_STOPS else reason if isinstance(reason, str) else None
    _messages_usage(stream, data.get("usage"))


# --------------------------------------------------------------------------- shared


def _detail(details: object, name: str) -> int | None:
    return _count(details.get(name)) if isinstance(details, dict) else None


def _chat_usage(prompt: object, completion: object, cached: object, reasoning: object) -> dict[str, Any]:
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


def _unary_parts(stream: Stream, reasoning: list[str], answer: list[str]) -> None:
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


GRAMMARS: dict[str, ApiGrammar] = {
    "completions": ApiGrammar("completions", "[DONE]", completions_event, completions_unary),
    "responses": ApiGrammar("responses", "response.completed", responses_event, responses_unary),
    "messages": ApiGrammar("messages", "message_stop", messages_event, messages_unary),
}
"""The grammar of each API but chat (chat's is ``StreamChecks._event``)."""
