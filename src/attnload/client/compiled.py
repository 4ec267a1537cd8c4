"""The compiled splitter and stream: the C types of ``attnload.native._fastpath`` with the Python they call back.

Importing this module fails (``ImportError``) when the extension was not built; ``client/stream.py``
imports it only then, and ``attnload.native`` decides whether it is used. ``CompiledSseSplitter``
is ``SseSplitter`` in C (native/sse.c) and ``CStream`` is ``PyStream`` in C (native/stream.c, with
its read loop in native/readloop.c); both give the same records as the pure-Python reference
(docs/performance.md, "The compiled path"; tests/test_fastpath.py compares them).
"""

from __future__ import annotations

from typing import Any

from attnload.apis import DEFAULT_API
from attnload.apis.base import Api
from attnload.client.budget import max_events
from attnload.client.checks import NEVER, StreamChecks
from attnload.client.sse import dataless_error, overflow_error
from attnload.client.transport import Response
from attnload.native._fastpath import Splitter, StreamBase


class CompiledSseSplitter(Splitter):
    """``SseSplitter`` in C (native/sse.c): the budgets' failures are raised here, with the same messages."""

    __slots__ = ()

    def _overflow(self, size: int) -> None:
        raise overflow_error(self.max_event_bytes, size)

    def _dataless(self) -> None:
        raise dataless_error(self.max_dataless)


class CStream(StreamBase, StreamChecks):
    """The compiled stream: splitting and the same-bytes stamping in C (native/stream.c)."""

    __slots__ = (
        "streaming",
        "max_tokens",
        "response",
        "usage",
        "finish_reason",
        "done_at",
        "eof",
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
        self.sse = CompiledSseSplitter()
        self.response: Response | None = None
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.done_at: float | None = None
        self.eof = False
        self.events_left = max_events(max_tokens)
        self.abandon_chunks = self.abandon_at = NEVER
        self.grammar = grammar
        self.answer_at: float | None = None
        self.reasoning_tokens = 0
        self.reasoning_chunks = 0
