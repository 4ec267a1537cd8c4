"""What both implementations of a stream do alike: every event the same-bytes check does not take,
and the checks once the response ended.

``PyStream`` (client/stream.py) keeps a stream's state in Python, ``CStream`` (client/compiled.py)
in C (native/stream.c); both inherit ``StreamChecks``, so errors, budgets and messages are one
code. ``StreamState`` names the state those methods read and write, whichever side holds it.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from geventhttpclient.response import HTTPResponse

from attnload.apis.base import Api, ErrorEvent
from attnload.client.budget import max_events
from attnload.client.classify import classify_error_object, classify_status
from attnload.client.sse import EventSplitter
from attnload.client.transport import Response
from attnload.errors import ErrorClass, RequestFailed


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
    grammar: Api
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
        """One event the same-bytes check did not take: the API's own reader (attnload.apis) handles it.

        ``[DONE]`` on the stream of an API that ends otherwise is a gateway's OpenAI-style terminator (LiteLLM
        writes it after ``response.completed``): skipped, so the API's own end event still decides whether the
        stream was complete."""
        if data == b"[DONE]" and self.grammar.end != "[DONE]":
            return
        try:
            self.grammar.event(self, kind, data, at)
        except ErrorEvent as exc:
            raise classify_error_object(exc.error, 200, api=self.grammar) from None

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
            raise classify_status(
                response.get_code(), bytes(response.body), header(response, "retry-after"), self.grammar
            )
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
            raise RequestFailed(ErrorClass.TRUNCATED, f"stream ended without {self.grammar.end}")
        self._check_length()

    def _finish_unary(self: StreamState, raw: bytes, response: Response) -> None:
        try:
            data = json.loads(raw)
        except ValueError:
            snippet = raw[:120].decode("utf-8", errors="replace").replace("\n", " ")
            raise RequestFailed(ErrorClass.BAD_RESPONSE, f"response is not JSON: {snippet!r}") from None
        if not isinstance(data, dict):
            raise RequestFailed(ErrorClass.BAD_RESPONSE, "response is not a JSON object")
        if data.get("error") or data.get("type") == "error":  # Responses carry "error": null
            raise classify_error_object(data.get("error") or data, 200, api=self.grammar)
        try:
            self.grammar.unary(self, data)
        except ErrorEvent as exc:
            raise classify_error_object(exc.error, 200, api=self.grammar) from None
        self._check_length()

    def _check_length(self: StreamState) -> None:
        if self.finish_reason == "length" and self.max_tokens:
            completion = (self.usage or {}).get("completion_tokens")
            produced = completion if isinstance(completion, int) else sum(self.chunk_tokens)
            if produced < self.max_tokens:
                raise RequestFailed(
                    ErrorClass.TRUNCATED, f"finish_reason length after {produced} of max_tokens {self.max_tokens}"
                )


def is_event_stream(response: Response) -> bool:
    return "text/event-stream" in str(header(response, "content-type") or "").lower()


def header(response: HTTPResponse, name: str) -> str | None:
    value = response.get(name)
    if isinstance(value, list):
        return value[0] if value else None
    return value
