"""The table of per-request metrics: what one request's record gives, each metric declared once.

A metric is a distribution taken from every :class:`RequestRecord` (a latency, a size): its key,
how it is taken from the record, which outcomes count, and the name it carries in each output —
the Prometheus series and its help, the results field, the ``--requests-out`` key, the CSV columns,
the report's summary columns and the dashboard panels. The recorder, the exposition, the results
summaries, the request log, the CSV, the report's summary tables and the dashboards iterate over
:data:`METRICS`; a view about one metric (the reasoning view) reads it by key. Adding a metric is
one entry here, and nothing else.

The record lives here too: the table is the list of what is taken from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Pairs = tuple[tuple[float, int], ...]
"""(value, weight) pairs: a histogram sample that stands for ``weight`` samples (ITL: one per token)."""

ANSWERED = frozenset({"ok", "abandoned"})
"""What an abandoned request saw is real: its first-token times and gaps count; whole-answer times do not."""
SEEN = ANSWERED | {"cancelled"}
"""What a request a stop cut saw is real too: a first token that came, and its gaps (``measure.survival``)."""
CUT = frozenset({"cancelled"})
OK = frozenset({"ok"})
EVERY = frozenset({"ok", "failed", "cancelled", "abandoned"})


@dataclass(frozen=True)
class RequestRecord:
    """The outcome of one request, as the client measured it."""

    model_key: str
    profile: str
    stage: int
    outcome: str  # "ok" | "failed" | "cancelled" | "abandoned" (closed mid-stream on purpose)
    error: str | None
    ttft_s: float | None
    itl_samples: Pairs
    """(gap per token, tokens in the chunk) pairs: one ITL sample per token."""
    e2e_s: float
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int | None
    """``usage.prompt_tokens_details.cached_tokens``; None when the server did not report it."""
    tokens_estimated: bool
    dispatch_lag_s: float | None = None
    good: bool = False
    prompt_calibrated: bool = False
    """The prompt was sized by a ratio learned from the server's usage (no tokenizer; ``workload.calibration``)."""
    reply_text: str | None = None
    """The assistant content exactly as streamed, kept only when a conversation resends it."""
    turn: int | None = None
    """1-based turn of a conversation request (None: a single-turn request)."""
    step: int | None = None
    """1-based step of an agent session's request (None: not an agent step)."""
    sent_at: float | None = None
    """Wall-clock send time (epoch s) of open-loop requests: the achieved arrival rate is measured on it."""
    started_perf: float | None = None
    """``perf_counter`` when the request went on the wire (the per-request log's ``start_s``)."""
    http_status: int | None = None
    """The response's HTTP status (None: no response head arrived)."""
    ttfat_s: float | None = None
    """Time to the first answer (content/text) token after any reasoning; None when the answer never began."""
    reasoning_tokens: int = 0
    """Output tokens that arrived as reasoning deltas (counted by the client)."""
    server_reasoning_tokens: int | None = None
    """The server's own reasoning count from usage (None: not reported)."""
    error_detail: str | None = None
    """A failure's one-line reading (redacted), for ``--requests-out`` and the error examples."""
    error_body: str | None = None
    """A failure's response body, redacted and cut to 300 bytes (None: no body)."""
    worker_stalled_s: float = 0.0
    """Seconds its worker was frozen or cut off from its master while it ran (set by the sender)."""

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.completion_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)


def answer_latency(record: RequestRecord) -> float | None:
    """TTFAT of a record: ``ttfat_s`` when the client set it; else, when no token arrived as reasoning,
    the first token was an answer token, so TTFAT is TTFT (a path that does not tell reasoning apart
    still gives TTFAT for plain answers); None when reasoning came and the answer never began."""
    if record.ttfat_s is not None:
        return record.ttfat_s
    return record.ttft_s if record.reasoning_tokens == 0 else None


def read_sizes(itl_samples: Pairs) -> Pairs:
    """(tokens in one read, reads of that size) of a stream, from its ITL samples.

    Chunks parsed from one ``recv`` share its time stamp, so a chunk after a zero gap came in the
    read before it; a positive gap starts a new read. The first read holds the first chunk (the
    one TTFT times, counted as one token) and any zero-gap chunks after it.
    """
    sizes: dict[int, int] = {}
    tokens = 1
    for gap, n in itl_samples:
        if gap > 0.0:
            sizes[tokens] = sizes.get(tokens, 0) + 1
            tokens = 0
        tokens += n
    sizes[tokens] = sizes.get(tokens, 0) + 1
    return tuple((float(size), count) for size, count in sizes.items())


def event_sizes(itl_samples: Pairs) -> Pairs:
    """(tokens in one event, events of that size) of a stream after its first event: what each server
    write carried, whether or not the client read several at once (a speculating server's verify step
    sends 1 + accepted drafts in one event)."""
    sizes: dict[int, int] = {}
    for _, n in itl_samples:
        sizes[n] = sizes.get(n, 0) + 1
    return tuple((float(size), count) for size, count in sizes.items())


@dataclass(frozen=True)
class PanelText:
    """A metric's dashboard panels (one per percentile): the title and the description."""

    title: str
    note: str
    client_side: bool = False
    """The description adds that the latency is measured by the load generator (simulated against the simulator)."""


@dataclass(frozen=True)
class Metric:
    """One per-request metric and its name in every output (None or empty: not in that output)."""

    key: str
    """The recorder's histogram name (``Series.hists[key]``), also on the wire between processes."""
    title: str
    """Its short name in column titles: ``TTFT`` gives ``TTFT p50 (ms)`` in the CSV, ``TTFT p50`` in the report."""
    take: Callable[[RequestRecord], float | None] | None = None
    """The sample of one record (None: the record gives none)."""
    take_pairs: Callable[[RequestRecord], Pairs] | None = None
    """Weighted samples of one record, for a metric with many per request (set instead of ``take``)."""
    outcomes: frozenset[str] = OK
    """The outcomes whose records count."""
    unit: str = "s"
    """``s``: seconds (milliseconds in the CSV and the report); else the unit the CSV names."""
    prometheus: str | None = None
    """The exported histogram, in the exposition's buckets (seconds)."""
    help: str = ""
    results_field: str | None = None
    """The :class:`Summary` field of every model, profile and stage in the results."""
    line_field: str | None = None
    """The ``--requests-out`` key: the record's value (``take``, whatever the outcome), in seconds."""
    csv: tuple[str, ...] = ()
    """Quantiles (``p50``, ``p99``) written as CSV columns."""
    csv_first: bool = False
    """Its CSV columns come before the throughput columns (the first release's layout); later metrics
    append after them, so no existing column moves."""
    columns: tuple[str, ...] = ()
    """Quantiles in the report's summary tables and in ``attnload compare``."""
    panel: PanelText | None = None


def _clamped_lag(record: RequestRecord) -> float | None:
    return None if record.dispatch_lag_s is None else max(record.dispatch_lag_s, 0.0)


def _positive_prompt(record: RequestRecord) -> float | None:
    return float(record.prompt_tokens) if record.prompt_tokens > 0 else None


def _stalled_itl(record: RequestRecord) -> Pairs:
    return record.itl_samples if record.worker_stalled_s else ()


def _reads(record: RequestRecord) -> Pairs:
    return read_sizes(record.itl_samples) if record.ttft_s is not None else ()


def _events(record: RequestRecord) -> Pairs:
    return event_sizes(record.itl_samples) if record.ttft_s is not None else ()


METRICS: list[Metric] = [
    Metric(
        "ttft",
        "TTFT",
        take=lambda r: r.ttft_s,
        outcomes=SEEN,
        prometheus="attnload_time_to_first_token_seconds",
        help="Request start to the first content chunk.",
        results_field="ttft_s",
        line_field="ttft_s",
        csv=("p50", "p99"),
        csv_first=True,
        columns=("p50", "p99"),
        panel=PanelText(
            "TTFT", "Request start to first content chunk (role-only chunks do not count). ", client_side=True
        ),
    ),
    Metric(
        "ttfat",
        "TTFAT",
        take=answer_latency,
        outcomes=SEEN,
        prometheus="attnload_ttfat_seconds",
        help="Request start to the first answer chunk (content after any reasoning).",
        results_field="ttfat_s",
        line_field="ttfat_s",
        csv=("p50", "p99"),
        panel=PanelText(
            "TTFAT",
            "Request start to the first answer (content) chunk after any reasoning; "
            "TTFT for a model that does not reason. ",
            client_side=True,
        ),
    ),
    Metric(
        "itl",
        "ITL",
        take_pairs=lambda r: r.itl_samples,
        outcomes=SEEN,
        prometheus="attnload_inter_token_latency_seconds",
        help="Gap between content chunks, per token.",
        results_field="itl_s",
        csv=("p50", "p99"),
        csv_first=True,
        columns=("p50", "p99"),
        panel=PanelText(
            "ITL",
            "Gap between content chunks per token, one sample per token. A p50 near 0 "
            "with a high p99 is the client-saturation signature: see the load generator health dashboard.",
        ),
    ),
    Metric(
        "tpot",
        "TPOT",
        take=lambda r: r.tpot_s,
        prometheus="attnload_time_per_output_token_seconds",
        help="(e2e - TTFT) / (output tokens - 1) per request.",
        results_field="tpot_s",
        line_field="tpot_s",
        csv=("p50",),
        csv_first=True,
        columns=("p50",),
        panel=PanelText("TPOT", "(end-to-end - TTFT) / (output tokens - 1), per request."),
    ),
    Metric(
        "e2e",
        "E2E",
        take=lambda r: r.e2e_s,
        prometheus="attnload_request_duration_seconds",
        help="Request start to the end of the response.",
        results_field="e2e_s",
        line_field="e2e_s",
        csv=("p50",),
        csv_first=True,
        panel=PanelText("End-to-end request duration", "Whole request, from the intended send time in open-loop runs."),
    ),
    Metric(
        "lag",
        "dispatch lag",
        take=_clamped_lag,
        outcomes=EVERY,
        prometheus="attnload_dispatch_lag_seconds",
        help="Open-loop lag between intended and actual send time.",
    ),
    Metric("prompt", "prompt", take=_positive_prompt, unit="tokens"),
    Metric("read_tokens", "tokens per read", take_pairs=_reads, outcomes=ANSWERED, unit="tokens"),
    Metric("event_tokens", "tokens per event", take_pairs=_events, outcomes=ANSWERED, unit="tokens"),
    Metric("ttft_censored", "TTFT censored", take=lambda r: r.e2e_s if r.ttft_s is None else None, outcomes=CUT),
    Metric("stalled_ttft", "stalled TTFT", take=lambda r: r.ttft_s if r.worker_stalled_s else None, outcomes=SEEN),
    Metric("stalled_itl", "stalled ITL", take_pairs=_stalled_itl, outcomes=SEEN),
    Metric("stalled_e2e", "stalled E2E", take=lambda r: r.e2e_s if r.worker_stalled_s else None),
]
"""``lag``: open-loop dispatch lag (a stage's ``dispatch_lag_s``, the request log's ``dispatch_lag_s``);
``prompt``: prompt tokens of each successful request (a context ladder's measured size per stage);
``read_tokens``: tokens per read of a stream (one sample per read, :func:`read_sizes`); ``event_tokens``:
tokens per streamed event after the first (``tokens_per_step``, :func:`event_sizes`);
``ttft_censored``: how long each request a stop cut had waited for a first token that never came (its TTFT
is at least that: ``measure.survival``); ``stalled_*``: the share of ``ttft``, ``itl`` and ``e2e`` from
requests whose worker was frozen or cut off while they ran, taken where those are, so the results give each
latency without them (``results/truth/stalls.py``) — each summarised by its own view, not a generic
``Summary``."""


def metric(key: str) -> Metric:
    """The table's entry for ``key`` (a view about one metric reads it so)."""
    for entry in METRICS:
        if entry.key == key:
            return entry
    raise KeyError(key)


def prometheus_name(key: str) -> str:
    """The exported series of ``key`` (an entry without one is a bug in the table)."""
    name = metric(key).prometheus
    if name is None:
        raise KeyError(f"{key} is not exported")
    return name
