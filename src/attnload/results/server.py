"""The server's view in the results, and the check that it agrees with the client's.

The runner hands over what the model servers' /metrics said per model and stage
(``ServerView``); this module puts it on ``stages[].server`` / ``models[].server`` and
flags a stage ``server_client_gap`` when the two views disagree beyond what the way they
count explains (docs/server-metrics.md, "Agreement check"):

- **Tokens.** The server counts generation tokens when it makes them; the client counts a
  request's completion tokens in the stage the request *started* in. Requests running
  across a stage boundary therefore move up to one request's tokens per concurrent request
  between stages, so the allowance is 5 % + 10 tokens plus (concurrency × mean completion
  tokens per request). More than that: someone else's traffic shares the server, or the
  series belongs to another model.
- **TTFT.** The server measures from when it received the request, the client from when it
  sent it: the client's p50 is larger by network and gateway time. A server p50 below half
  the client's with more than 50 ms between them (or above twice the client's, which no
  network explains) is flagged. The server's p50 comes from histogram buckets (vLLM's TTFT:
  …0.1, 0.25, 0.5…), so it is only known to lie in its bucket: a client p50 inside that bucket
  is no gap, and half/twice are measured from the bucket's edges, not from the interpolated
  value (vLLM's 1–2.5 s bucket interpolates a true 2.4 s as 1.75 s).
"""

from __future__ import annotations

import math

from attnload.results.model import ServerSummary, StageSummary
from attnload.scrape.summary import StageSummaries

SERVER_GAP_FLAG = "server_client_gap"
"""The stage flag (``models[].stages[].flags``) of a stage whose server and client views disagree beyond
their tolerance, so the client's measurement is suspect (``--fail-on server-gap`` watches it)."""
TOKENS_REL_TOLERANCE = 0.05
TOKENS_ABS_TOLERANCE = 10
TTFT_RATIO = 0.5
"""Server TTFT p50 below this share of the client's (or above its inverse) is a gap..."""
TTFT_MIN_GAP_S = 0.05
"""...when they are also this far apart (a few ms of network is no gap)."""
MIN_REQUESTS_FOR_TTFT = 10
"""A server TTFT above the client's is flagged from this many client TTFTs (a server far below is at any count)."""
TTFT_BETWEEN = (
    "the API server's queue and tokenization (before the engine's clock starts), a gateway, the network and the "
    "client's own wait"
)
"""What a client's TTFT holds that the server's does not (vLLM's histogram starts when the engine gets the request)."""
WIDE_BUCKET_RATIO = 1.25
"""A bucket whose upper bound exceeds this multiple of its lower one is shown as its range ("100–250 ms")."""


ServerResults = StageSummaries[ServerSummary]
"""Server summaries as the server view produced them: per model key, per stage index, and whole-run."""


def with_server(stage: StageSummary, server: ServerSummary | None) -> StageSummary:
    """``stage`` with its server view and, where they disagree, the ``server_client_gap`` flag."""
    if server is None:
        return stage
    reasons = gap_reasons(stage, server)
    flags = list(stage.flags)
    if reasons and SERVER_GAP_FLAG not in flags:
        flags.append(SERVER_GAP_FLAG)
    return stage.model_copy(update={"server": server, "flags": flags, "server_gap_reasons": reasons})


def gap_reasons(stage: StageSummary, server: ServerSummary) -> list[str]:
    """Why the server's and the client's views of one stage disagree (empty: they agree)."""
    reasons = []
    if server.generation_tokens is not None and stage.requests.total:
        client, served = stage.completion_tokens, float(server.generation_tokens)
        allowance = token_allowance(stage)
        if abs(served - client) > allowance:
            reasons.append(
                f"server generated {served:.0f} tokens, the client received {client} "
                f"(allowed difference {allowance:.0f})"
            )
    client_p50, server_p50 = stage.ttft_s.p50, server.ttft_p50_s
    if client_p50 is not None and server_p50 is not None and stage.ttft_s.count:
        bucket = server.ttft_p50_bucket_s
        low, high = (bucket[0], bucket[1]) if bucket is not None else (server_p50, server_p50)
        shown = ttft_text(server_p50, bucket)
        count = stage.ttft_s.count
        # far below the client's: named whatever the sample (the long rung of a ladder may finish one request),
        # with what lies between the two clocks
        if high is not None and high < TTFT_RATIO * client_p50 and client_p50 - high > TTFT_MIN_GAP_S:
            bound = "≥ " if "p50" in stage.ttft_s.lower_bound else ""
            reasons.append(
                f"server TTFT p50 {shown} < half the client's {bound}{client_p50 * 1000:,.0f} ms "
                f"({count:,} request{'s' if count != 1 else ''}): between them lie {TTFT_BETWEEN}"
            )
        elif count < MIN_REQUESTS_FOR_TTFT:
            pass
        elif low > client_p50 / TTFT_RATIO and low - client_p50 > TTFT_MIN_GAP_S:
            reasons.append(
                f"server TTFT p50 {shown} > twice the client's "
                f"{client_p50 * 1000:.0f} ms (another model's series, or other traffic)"
            )
    return reasons


def is_wide(bucket: tuple[float, float | None] | None) -> bool:
    """Whether a quantile's bucket is too coarse to print the interpolated value alone."""
    if bucket is None:
        return False
    low, high = bucket
    return high is None or low <= 0 or high > WIDE_BUCKET_RATIO * low


def _ms(seconds: float) -> str:
    value = seconds * 1000.0
    return f"{value:,.0f}" if value >= 10 or value.is_integer() else f"{value:.2g}"


def bucket_range(bucket: tuple[float, float | None]) -> str:
    """``100–250`` (ms), ``0–1`` for the first bucket, ``>2,560,000`` for the ``+Inf`` one."""
    low, high = bucket
    return f">{_ms(low)}" if high is None else f"{_ms(low)}–{_ms(high)}"


def ttft_text(seconds: float | None, bucket: tuple[float, float | None] | None, unit: str = " ms") -> str:
    """A server TTFT quantile as it should read: its bucket when wide ("100–250 ms"), else the value."""
    if seconds is None:
        return "—"
    if bucket is not None and is_wide(bucket):
        return bucket_range(bucket) + unit
    return f"{seconds * 1000:.0f}{unit}"


def token_allowance(stage: StageSummary) -> float:
    """How far the two token counts may differ: 5 % + 10, plus the tokens of the requests in
    flight at a stage boundary (closed loop: the users; open loop: rate × mean latency)."""
    ok = stage.requests.ok
    per_request = stage.completion_tokens / ok if ok else 0.0
    if stage.users is not None:
        concurrency = float(stage.users)
    elif stage.rate is not None and stage.e2e_s.mean is not None:
        concurrency = stage.rate * stage.e2e_s.mean
    else:
        concurrency = 0.0
    return TOKENS_REL_TOLERANCE * stage.completion_tokens + TOKENS_ABS_TOLERANCE + math.ceil(concurrency) * per_request
