"""The state of one response being read, and what is done with each of its events.

``PyStream`` is the pure-Python reference; ``CStream`` (client/compiled.py) keeps the same state
in C and stamps the common chunks there (native/stream.c); both share ``StreamChecks``
(client/checks.py) for every event the same-bytes check does not take and for the checks at the
end, so errors, budgets and messages are one code. ``new_stream`` picks the implementation
``attnload.native`` chose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, TypeGuard

from geventhttpclient.response import HTTPParseError

from attnload import native
from attnload.apis import DEFAULT_API, api_of
from attnload.apis.base import Api
from attnload.apis.openai import PLAIN_CONTENT, cached_tokens
from attnload.client.budget import max_events
from attnload.client.checks import NEVER, StreamChecks
from attnload.client.sse import EventSplitter, SseSplitter
from attnload.client.transport import Response

if TYPE_CHECKING:
    from attnload.client.compiled import CStream

_EXTENSION = native.extension()

BODY_ERRORS: tuple[type[Exception], ...] = (HTTPParseError,) + ((_EXTENSION.FramingError,) if _EXTENSION else ())
"""What a malformed HTTP response raises: llhttp's error, or the compiled chunked framing's."""
PUMP_DONE, PUMP_DONE_OPEN, PUMP_COMPLETE, PUMP_EOF, PUMP_TIMEOUT, PUMP_ABANDON = range(6)
"""How ``StreamBase.pump`` ended (native/readloop.c): [DONE] then the message's end (or not: close
the connection), the body's end without [DONE], the peer closed, a deadline passed, ``--abandon-after``."""


class PyStream(StreamChecks):
    """The pure-Python stream: the reference the compiled one (``CStream``) is tested against."""

    __slots__ = (
        "streaming",
        "max_tokens",
        "sse",
        "response",
        "first_at",
        "last_at",
        "gaps",
        "chunk_tokens",
        "usage",
        "finish_reason",
        "done",
        "done_at",
        "eof",
        "plain_head",
        "plain_tail",
        "texts",
        "events_left",
        "abandon_chunks",
        "abandon_at",
        "grammar",
        "answer_at",
        "reasoning_tokens",
        "reasoning_chunks",
    )

    def __init__(self, streaming: bool, max_tokens: int, grammar: Api = DEFAULT_API) -> None:
        self.streaming = streaming
        self.max_tokens = max_tokens
        self.sse: EventSplitter = SseSplitter()
        self.response: Response | None = None
        self.first_at: float | None = None
        self.last_at = 0.0
        self.gaps: list[float] = []
        self.chunk_tokens: list[int] = []
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.done_at: float | None = None
        self.eof = False
        self.plain_head: bytes | None = None  # the bytes before and after the last plain delta's content
        self.plain_tail = b""
        self.texts: list[str] | None = None
        """The content pieces as streamed, only when the caller asked for the text."""
        self.events_left = max_events(max_tokens)
        """Events this response may still carry before it counts as a stream that will not end."""
        self.abandon_chunks = self.abandon_at = NEVER
        """``--abandon-after``: content chunks read, or the perf_counter time, at which the client leaves."""
        self.grammar = grammar
        """How the answer streams back: the API object's reader (attnload.apis)."""
        self.answer_at: float | None = None
        """Arrival of the first answer (content) chunk, after any reasoning (None: no answer yet)."""
        self.reasoning_tokens = 0
        """Output tokens that arrived as reasoning deltas (estimated per delta, as content chunks are)."""
        self.reasoning_chunks = 0
        """Reasoning deltas: the reasoning's tokens when the server's count says one token came per delta."""

    def consume(self, at: float, origin: float) -> None:
        """Handle the events parsed so far; all of them arrived in the ``recv`` that returned at ``at``."""
        events, self.sse.events = self.sse.events, []
        self.events_left -= len(events)
        if self.events_left < 0:
            self._runaway()
        for kind, data in events:
            # A stream's chunks differ only in their content: same bytes before and after it as the
            # last plain delta means the same fields, so only the content needs checking.
            head, tail = self.plain_head, self.plain_tail
            if (
                head is not None
                and kind == b"message"
                and data.startswith(head)
                and data.endswith(tail)
                and len(data) >= len(head) + len(tail)
            ):
                raw = data[len(head) : len(data) - len(tail)]
                if PLAIN_CONTENT.fullmatch(raw) is not None:
                    if not raw:
                        continue  # empty content, finish_reason null: nothing to record
                    try:
                        text = raw.decode()
                    except UnicodeDecodeError:
                        pass
                    else:
                        if self.first_at is None:
                            self.first_at = at
                        else:
                            self.gaps.append(at - self.last_at)
                        self.last_at = at
                        self.chunk_tokens.append(cached_tokens(text))
                        if self.texts is not None:
                            self.texts.append(text)
                        continue
            self._event(kind, data, at)

    def _stamp(self, at: float, tokens: int, text: str | None) -> None:
        """Time one content chunk, count its tokens, keep its text (None: nothing to keep)."""
        if self.first_at is None:
            self.first_at = at
        else:
            self.gaps.append(at - self.last_at)
        self.last_at = at
        self.chunk_tokens.append(tokens)
        if text is not None and self.texts is not None:
            self.texts.append(text)


def _compiled_stream() -> type[CStream] | None:
    """``CStream`` when the extension was built (whatever the switch says), else None."""
    if _EXTENSION is None:
        return None
    from attnload.client.compiled import CStream

    return CStream


COMPILED_STREAM = _compiled_stream()
"""The compiled stream's class, or None when the extension was not built."""

Stream: TypeAlias = "PyStream | CStream"
"""A stream of either implementation: what ``new_stream`` returns."""


def frames_in_c(stream: Stream) -> TypeGuard[CStream]:
    """The compiled read loop can take this stream's body (``StreamBase.pump``)."""
    return COMPILED_STREAM is not None and type(stream) is COMPILED_STREAM


def frames_chunked(response: Response) -> bool:
    """A 200 whose head is parsed and whose body is chunked and no more: what the compiled loop frames."""
    encoding = response.get("transfer-encoding")
    return (
        response.headers_complete
        and not response.message_complete
        and response.get_code() == 200
        and isinstance(encoding, str)
        and encoding.strip().lower() == "chunked"
        and response.get("content-length") is None
    )


def new_stream(streaming: bool, max_tokens: int, api: str = "chat") -> Stream:
    """A stream of the implementation ``attnload.native`` chose (the C one unless it is absent or turned off),
    reading the answer as the API named ``api`` streams it (attnload.apis)."""
    grammar = api_of(api)
    if COMPILED_STREAM is not None and native.active() is not None:
        return COMPILED_STREAM(streaming, max_tokens, grammar)
    return PyStream(streaming, max_tokens, grammar)
