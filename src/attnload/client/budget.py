"""Read budgets: how much of a response the client will read before it calls the server runaway.

Why: a server that never ends its answer (one endless SSE line, endless valid events with
no ``[DONE]``, an endless 200 HTML body, an endless header) must cost a bounded amount of
memory and time, and end in a classified failure rather than a wedged user. Each budget is
far above what a real OpenAI-compatible server sends, so no honest response meets it:

- ``MAX_EVENT_BYTES``: one SSE event (the bytes between blank lines), then ``bad_response``.
- ``MAX_HEADER_BYTES``: the status line and headers, then ``bad_response``.
- ``max_events(max_tokens)``: events in one streamed response; a server that streams more
  than ``max_tokens`` allows (plus slack for role, usage and finish events) is not going
  to stop, so the response is cut as ``truncated``.
- ``MAX_DATALESS_BLOCKS``: blank-line-separated blocks with no ``data:`` field (comments,
  pings, an HTML page's paragraphs), then ``bad_response``.
- ``MAX_BODY_BYTES``: a non-streamed answer or an error body; past it a 200 is
  ``bad_response`` and an error status is classified by its status and what was read.
- wall clock: ``total_timeout_s`` bounds the whole request (``timeout``), whatever arrives.

docs/troubleshooting.md lists the same budgets for users.
"""

from __future__ import annotations

MAX_EVENT_BYTES = 1 << 20
MAX_HEADER_BYTES = 64 << 10
MAX_BODY_BYTES = 16 << 20
MAX_DATALESS_BLOCKS = 4096
EVENT_SLACK = 256
"""Events a stream may carry beyond two per requested token (role, usage, finish, keep-alives)."""
UNBOUNDED_TOKENS = 1 << 17
"""``max_tokens`` assumed when a request names none: a large model's longest answer."""
DRAIN_READS = 64
"""Reads of already-buffered bytes at a stop (64 x 64 KiB): what the kernel holds, not an endless stream."""
YIELD_EVERY = 32
"""TLS reads that found data waiting: after this many in a row the reader yields to the gevent hub."""


def max_events(max_tokens: int) -> int:
    """Events one streamed response may carry: two per token asked for (some servers split a token's
    text, reasoning models send reasoning and content), plus ``EVENT_SLACK``."""
    return 2 * (max_tokens if max_tokens > 0 else UNBOUNDED_TOKENS) + EVENT_SLACK
