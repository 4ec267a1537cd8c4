"""OpenAI's chat completions and completions: ``data:`` lines of ``choices[0]`` deltas, a usage chunk, ``[DONE]``.

Most chunks of a stream are plain deltas: one choice, index 0, no finish, text without
escapes. ``PLAIN_DELTA``/``PLAIN_TEXT`` recognise them from their bytes, so the first one is
read without ``json.loads`` and arms the client's same-bytes check (``plain_head``/``plain_tail``),
which stamps every later one without an event call, in C on the compiled path. Reasoning
arrives in ``delta.reasoning`` (vLLM 0.32) or ``delta.reasoning_content`` (older servers).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from attnload.apis.base import Api, Stream, load_event, text_of, unary_parts
from attnload.errors import ErrorClass, RequestFailed
from attnload.measure.tokens import chunk_tokens, message_text

PLAIN_STRING = rb'[^"\\\x00-\x1f]*'
"""A JSON string body without escapes or control characters."""
_SCALAR_FIELD = rb'(?!"error"|"choices")"\w+":(?:"' + PLAIN_STRING + rb'"|-?(?:0|[1-9]\d*)|null)'
PLAIN_DELTA = re.compile(
    rb"\{(?:" + _SCALAR_FIELD + rb',)*"choices":\[\{"index":0,"delta":\{(?:"role":"assistant",)?'
    rb'"content":"(' + PLAIN_STRING + rb')"\}(?:,"logprobs":null)?,"finish_reason":null(?:,"stop_reason":null)?\}\]'
    rb"(?:," + _SCALAR_FIELD + rb")*\}"
)
"""A plain chat delta: json.loads of such bytes yields no error, no usage dict and
``choices[0].delta.content == group(1).decode()`` (~5 µs a chunk saved)."""
PLAIN_TEXT = re.compile(
    rb"\{(?:" + _SCALAR_FIELD + rb',)*"choices":\[\{"index":0,"text":"(' + PLAIN_STRING + rb')"'
    rb'(?:,"logprobs":null)?(?:,"finish_reason":null)?(?:,"stop_reason":null)?'
    rb'(?:,"prompt_token_ids":null)?(?:,"token_ids":null)?\}\]'
    rb"(?:," + _SCALAR_FIELD + rb")*\}"
)
"""A plain completions delta, as ``PLAIN_DELTA`` for chat."""
PLAIN_CONTENT = re.compile(PLAIN_STRING)
"""The content group alone: a chunk that repeats the previous match's bytes around its content matches
the whole pattern exactly when its content matches this (client/stream.py; native/stream.c checks the same)."""
_TOKEN_CACHE: dict[str, int] = {}
"""chunk text -> ``chunk_tokens(text)``: token texts repeat, so most chunks hit (bounded)."""
_TOKEN_CACHE_SIZE = 65536


def cached_tokens(text: str) -> int:
    """``chunk_tokens(text)``, cached: token texts repeat, so most chunks hit."""
    tokens = _TOKEN_CACHE.get(text)
    if tokens is None:
        tokens = chunk_tokens(text)
        if len(_TOKEN_CACHE) < _TOKEN_CACHE_SIZE:
            _TOKEN_CACHE[text] = tokens
    return tokens


def _plain(stream: Stream, pattern: re.Pattern[bytes], kind: bytes, data: bytes, at: float) -> bool:
    """A plain delta: stamped, and the same-bytes check armed with the bytes around its content."""
    if kind != b"message":
        return False
    plain = pattern.fullmatch(data)
    if plain is None:
        return False
    raw = plain.group(1)
    if not raw:
        return pattern is PLAIN_DELTA  # empty chat content, finish_reason null: nothing to record
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return False  # json.loads reports it
    # Only a stamped answer chunk arms the same-bytes check, so the chunks it stamps come after answer_at.
    stream.plain_head, stream.plain_tail = data[: plain.start(1)], data[plain.end(1) :]
    stream._answer(at, cached_tokens(text), text)
    return True


def _event_choice(
    stream: Stream, pattern: re.Pattern[bytes], kind: bytes, data: bytes, at: float
) -> dict[str, Any] | None:
    """The event's ``choices[0]`` left to read, or None when a plain delta, ``[DONE]`` or a choice-less
    chunk (its usage taken) was the whole of it: the prologue chat and completions share."""
    if _plain(stream, pattern, kind, data, at):
        return None
    if data == b"[DONE]":
        stream.done = True
        return None
    return first_choice(stream, load_event(kind, data))


def first_choice(stream: Stream, chunk: dict[str, Any]) -> dict[str, Any] | None:
    """A chunk's ``choices[0]`` (None: a usage-only or empty chunk), its usage kept."""
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        stream.usage = usage
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        if usage is None:
            raise RequestFailed(ErrorClass.BAD_RESPONSE, "stream chunk without `choices`")
        return None
    if not choices:
        return None
    choice = choices[0]
    if not isinstance(choice, dict):
        raise RequestFailed(ErrorClass.BAD_RESPONSE, "`choices[0]` is not an object")
    return choice


def _choices(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise RequestFailed(ErrorClass.BAD_RESPONSE, "response has no `choices` (reading choices failed)")
    return choices[0]


class Chat(Api):
    """``POST /v1/chat/completions``: the workload's own shape."""

    def asks_usage(self) -> bool:
        return True

    def event(self, stream: Stream, kind: bytes, data: bytes, at: float) -> None:
        choice = _event_choice(stream, PLAIN_DELTA, kind, data, at)
        if choice is None:
            return
        delta = choice.get("delta") or {}
        if isinstance(delta, dict):
            content = delta.get("content")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if content and isinstance(content, str):  # an answer chunk: time it, count it, keep its content
                stream._answer(at, chunk_tokens(content), content)
            elif not content and reasoning and isinstance(reasoning, str):  # timed and counted, not kept
                stream._reasoning(at, chunk_tokens(reasoning))
        if choice.get("finish_reason"):
            stream.finish_reason = choice["finish_reason"]

    def unary(self, stream: Stream, data: dict[str, Any]) -> None:
        choice = _choices(data)
        message = choice.get("message") or {}
        message = message if isinstance(message, dict) else {}
        content = message.get("content")
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        text = content or reasoning or ""
        stream.first_at = time.perf_counter()
        stream.chunk_tokens = [chunk_tokens(text)] if isinstance(text, str) and text else []
        if isinstance(content, str) and content:
            stream.answer_at = stream.first_at
            if stream.texts is not None:
                stream.texts.append(content)
        if isinstance(reasoning, str) and reasoning:
            stream.reasoning_tokens = chunk_tokens(reasoning)
        stream.finish_reason = choice.get("finish_reason")
        usage = data.get("usage")
        stream.usage = usage if isinstance(usage, dict) else None


class Completions(Api):
    """``POST /v1/completions``: the messages' texts as one prompt; no reasoning channel."""

    path_tail = "/completions"
    reasoning_as_text = True

    def prompt_fields(self, messages: Sequence[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
        return {"prompt": completion_prompt(messages), "max_tokens": max_tokens}

    def asks_usage(self) -> bool:
        return True

    def prompt_messages(self, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        prompt = body.get("prompt")
        return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else []

    def event(self, stream: Stream, kind: bytes, data: bytes, at: float) -> None:
        choice = _event_choice(stream, PLAIN_TEXT, kind, data, at)
        if choice is None:
            return
        text = text_of(choice.get("text"))
        if text is not None:
            stream._answer(at, chunk_tokens(text), text)
        if choice.get("finish_reason"):
            stream.finish_reason = choice["finish_reason"]

    def unary(self, stream: Stream, data: dict[str, Any]) -> None:
        choice = _choices(data)
        unary_parts(stream, [], [text_of(choice.get("text")) or ""])
        stream.finish_reason = choice.get("finish_reason")
        usage = data.get("usage")
        stream.usage = usage if isinstance(usage, dict) else None


def completion_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    """The plain prompt of a completions request: the messages' texts, one paragraph each."""
    return "\n\n".join(message_text(m.get("content", "")) for m in messages)
