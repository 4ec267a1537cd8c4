"""What both implementations of a stream do alike: every event the same-bytes check does not take,
and the checks once the response ended.

``PyStream`` (client/stream.py) keeps a stream's state in Python, ``CStream`` (client/compiled.py)
in C (native/stream.c); both inherit ``StreamChecks``, so errors, budgets and messages are one
code. ``StreamState`` names the state those methods read and write, whichever side holds it.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Protocol

from geventhttpclient.response import HTTPResponse

from attnload.client.budget import max_events
from attnload.client.classify import classify_error_object, classify_status
from attnload.client.sse import EventSplitter
from attnload.client.transport import Response
from attnload.errors import ErrorClass, RequestFailed
from attnload.measure.tokens import chunk_tokens


class Grammar(Protocol):
    """How an API other than chat streams its answer (client/grammar.py holds one per API)."""

    end: str
    """The event that ends a complete stream."""

    def event(self, stream: Any, kind: bytes, data: bytes, at: float) -> None: ...

    def unary(self, stream: Any, data: dict[str, Any]) -> None: ...


class StreamState(Protocol):
    """The state of one response being read, as ``StreamChecks`` sees it (``PyStream`` or ``CStream``)."""

    streaming: bool
    max_tokens: int
    first_at: float | None
    chunk_tokens: list[int]
    texts: list[str] | None
    plain_head: bytes | None
    plain_tail: bytes
    usage: dict[str, Any] | None
    finish_reason: str | None
    done: bool
    grammar: Grammar | None
    answer_at: float | None
    reasoning_tokens: int
    reasoning_chunks: int

    @property
    def sse(self) -> EventSplitter: ...

    @property
    def response(self) -> Response | None: ...

    def _stamp(self, at: float, tokens: int, text: str | None) -> None: ...

    def _answer(self, at: float, tokens: int, text: str | None) -> None: ...

    def _reasoning(self, at: float, tokens: int) -> None: ...

    def _finish_unary(self, raw: bytes, response: Response) -> None: ...

    def _check_length(self) -> None: ...


# A plain content delta, the bulk of every stream: one choice, index 0, finish_reason null,
# delta {content} (optionally after role "assistant"), content without escapes or control
# characters, and only scalar fields (never "error" or "choices") around "choices".
# json.loads of such bytes yields exactly: no error, no usage dict, choices[0].delta.content
# == group(1).decode() — so consume() reads it without json.loads (~5 µs a chunk saved);
# anything else takes the full path below.
_PLAIN_STRING = rb'[^"\\\x00-\x1f]*'  # a JSON string body without escapes or control characters
_SCALAR_FIELD = rb'(?!"error"|"choices")"\w+":(?:"' + _PLAIN_STRING + rb'"|-?(?:0|[1-9]\d*)|null)'
_PLAIN_DELTA = re.compile(
    rb"\{(?:" + _SCALAR_FIELD + rb',)*"choices":\[\{"index":0,"delta":\{(?:"role":"assistant",)?'
    rb'"content":"(' + _PLAIN_STRING + rb')"\}(?:,"logprobs":null)?,"finish_reason":null(?:,"stop_reason":null)?\}\]'
    rb"(?:," + _SCALAR_FIELD + rb")*\}"
)
PLAIN_STRING, SCALAR_FIELD = _PLAIN_STRING, _SCALAR_FIELD
"""The pieces of ``_PLAIN_DELTA``, for the other APIs' plain deltas (client/grammar.py)."""
PLAIN_CONTENT = re.compile(_PLAIN_STRING)
"""The content group of ``_PLAIN_DELTA`` alone: a chunk that repeats the previous match's bytes
around its content matches the whole pattern exactly when its content matches this (``PyStream.consume``;
native/stream.c checks the same bytes)."""
_TOKEN_CACHE: dict[str, int] = {}
"""chunk text -> ``chunk_tokens(text)``: token texts repeat, so most chunks hit (bounded)."""
_TOKEN_CACHE_SIZE = 65536

NEVER = float("inf")
"""A stop condition that is never reached (``abandon_chunks``, ``abandon_at`` without ``--abandon-after``)."""


class StreamChecks:
    """What both implementations of a stream share: the rare events, and the checks at the end.

    A stream holds ``sse`` (its splitter), ``first_at``/``last_at``/``gaps``/``chunk_tokens``/
    ``texts`` (the timings and counts), ``plain_head``/``plain_tail`` and ``events_left``;
    ``PyStream`` keeps them in Python, ``CStream`` in C. ``consume`` stamps every chunk whose bytes
    around the content equal the last plain delta's and hands any other event to ``_event``.
    """

    __slots__ = ()

    # what these methods assign, held by the subclass: declared so the type is not inferred from one assignment
    first_at: float | None
    chunk_tokens: list[int]
    plain_head: bytes | None
    plain_tail: bytes
    usage: dict[str, Any] | None
    finish_reason: str | None
    done: bool
    answer_at: float | None
    reasoning_tokens: int
    reasoning_chunks: int

    def _answer(self: StreamState, at: float, tokens: int, text: str | None) -> None:
        """Time one answer (content) chunk: the first is the time to the first answer token."""
        if self.answer_at is None:
            self.answer_at = at
        self._stamp(at, tokens, text)

    def _reasoning(self: StreamState, at: float, tokens: int) -> None:
        """Time one reasoning chunk: an output token like any other (TTFT, ITL), counted apart."""
        self.reasoning_tokens += tokens
        self.reasoning_chunks += 1
        self._stamp(at, tokens, None)

    def _event(self: StreamState, kind: bytes, data: bytes, at: float) -> None:
        """One event the same-bytes check did not take: a first or changed plain delta, [DONE], JSON."""
        grammar = self.grammar
        if grammar is not None:  # an API other than chat (client/grammar.py)
            grammar.event(self, kind, data, at)
            return
        if kind == b"message":
            plain = _PLAIN_DELTA.fullmatch(data)
            if plain is not None:  # the bytes pin every field the slow path would read
                raw = plain.group(1)
                if not raw:
                    return  # empty content, finish_reason null: nothing to record
                try:
                    text = raw.decode()
                except UnicodeDecodeError:
                    pass  # let json.loads report it exactly as it always has
                else:
                    # Only a stamped answer chunk arms the same-bytes check, so the chunks it stamps
                    # (in consume, without this method) always come after answer_at was set.
                    self.plain_head, self.plain_tail = data[: plain.start(1)], data[plain.end(1) :]
                    self._answer(at, cached_tokens(text), text)
                    return
        if data == b"[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            if kind == b"error":  # an SSE error event whose data is plain text
                raise classify_error_object(data[:300].decode("utf-8", errors="replace"), 200) from None
            raise RequestFailed(ErrorClass.BAD_RESPONSE, f"malformed JSON in stream: {data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise RequestFailed(ErrorClass.BAD_RESPONSE, f"stream chunk is not an object: {data[:80]!r}")
        if kind == b"error" or "error" in chunk:
            raise classify_error_object(chunk.get("error", chunk), 200)
        choice = first_choice(self, chunk)
        if choice is None:
            return
        delta = choice.get("delta") or {}
        if isinstance(delta, dict):
            content = delta.get("content")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")  # older servers, vLLM 0.32
            if content and isinstance(content, str):  # an answer chunk: time it, count it, keep its content
                self._answer(at, chunk_tokens(content), content)
            elif (
                not content and reasoning and isinstance(reasoning, str)
            ):  # a reasoning chunk: timed and counted, not kept
                self._reasoning(at, chunk_tokens(reasoning))
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def _runaway(self: StreamState) -> None:
        raise RequestFailed(
            ErrorClass.TRUNCATED,
            f"more than {max_events(self.max_tokens)} events for max_tokens "
            f"{self.max_tokens} and no [DONE]: the stream would not end, so it "
            f"was cut",
        )

    def finish(self: StreamState) -> None:
        """Check the completed response: non-streaming body, [DONE], truncation."""
        response = self.response
        assert response is not None
        if response.headers_complete and response.get_code() != 200:
            raise classify_status(response.get_code(), bytes(response.body), header(response, "retry-after"))
        if not self.streaming:
            self._finish_unary(bytes(response.body), response)
            return
        if response.headers_complete and not is_event_stream(response) and not self.first_at:
            # A 200 that is not SSE: a gateway error page or a JSON body (error or a non-streamed answer).
            self._finish_unary(bytes(response.body) + self.sse.pending, response)
            return
        if not self.done:
            if not response.headers_complete:
                raise RequestFailed(ErrorClass.CONNECTION, "connection closed before the response headers")
            end = "[DONE]" if self.grammar is None else self.grammar.end
            raise RequestFailed(ErrorClass.TRUNCATED, f"stream ended without {end}")
        self._check_length()

    def _finish_unary(self: StreamState, raw: bytes, response: Response) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            snippet = raw[:120].decode("utf-8", errors="replace").replace("\n", " ")
            raise RequestFailed(ErrorClass.BAD_RESPONSE, f"response is not JSON: {snippet!r}") from None
        if not isinstance(data, dict):
            raise RequestFailed(ErrorClass.BAD_RESPONSE, "response is not a JSON object")
        if self.grammar is not None:  # an API other than chat (client/grammar.py); Responses carry "error": null
            if data.get("error") or data.get("type") == "error":
                raise classify_error_object(data.get("error") or data, 200)
            self.grammar.unary(self, data)
            self._check_length()
            return
        if "error" in data:
            raise classify_error_object(data["error"], 200)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise RequestFailed(ErrorClass.BAD_RESPONSE, "response has no `choices` (reading choices failed)")
        message = choices[0].get("message") or {}
        text = message.get("content") or message.get("reasoning_content") or "" if isinstance(message, dict) else ""
        self.first_at = time.perf_counter()
        self.chunk_tokens = [chunk_tokens(text)] if text else []
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) and content:
            self.answer_at = self.first_at
        reasoning = message.get("reasoning_content") or message.get("reasoning") if isinstance(message, dict) else None
        if isinstance(reasoning, str) and reasoning:
            self.reasoning_tokens = chunk_tokens(reasoning)
        if self.texts is not None and isinstance(content, str):
            self.texts.append(content)
        self.finish_reason = choices[0].get("finish_reason")
        usage = data.get("usage")
        self.usage = usage if isinstance(usage, dict) else None
        self._check_length()

    def _check_length(self: StreamState) -> None:
        if self.finish_reason == "length" and self.max_tokens:
            completion = (self.usage or {}).get("completion_tokens")
            produced = completion if isinstance(completion, int) else sum(self.chunk_tokens)
            if produced < self.max_tokens:
                raise RequestFailed(
                    ErrorClass.TRUNCATED, f"finish_reason length after {produced} of max_tokens {self.max_tokens}"
                )


def first_choice(stream: StreamState, chunk: dict[str, Any]) -> dict[str, Any] | None:
    """A chat or completions chunk's ``choices[0]`` (None: a usage-only or empty chunk), its usage kept."""
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


def cached_tokens(text: str) -> int:
    """``chunk_tokens(text)``, cached: token texts repeat, so most chunks hit."""
    tokens = _TOKEN_CACHE.get(text)
    if tokens is None:
        tokens = chunk_tokens(text)
        if len(_TOKEN_CACHE) < _TOKEN_CACHE_SIZE:
            _TOKEN_CACHE[text] = tokens
    return tokens


def is_event_stream(response: Response) -> bool:
    return "text/event-stream" in str(header(response, "content-type") or "").lower()


def header(response: HTTPResponse, name: str) -> str | None:
    value = response.get(name)
    if isinstance(value, list):
        return value[0] if value else None
    return value
