"""The one typed results model (schema ``attnload.results/v1``) every output renders.

Console tables, the JSON file, the HTML report, the Locust "LLM" tab and the Prometheus
series all read these objects; no other module computes a percentile. Summaries come
from mergeable histograms (``measure.histogram.LogHistogram``), so no reported percentile
exceeds the reported max.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from attnload.errors import UsageError, validated
from attnload.measure.metrics import METRICS
from attnload.results.fleet import LostWorker, Partial, RefusedWorker, StalledWorker
from attnload.results.microscope.schema import DecodeFitSummary, KvCapacity, KvRead
from attnload.results.truth.fields import Censored, ErrorExample, Evidence, Interval, StalledExcluded
from attnload.scrape.summary import GaugeSummary as GaugeSummary  # the results' types, built by scrape/
from attnload.scrape.summary import GpuSummary, ServerSummary

SCHEMA: Final = "attnload.results/v1"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Summary(_Model):
    """A latency distribution in seconds."""

    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None
    lower_bound: list[str] = []
    """Percentiles (``p50`` … ``p99``) the data could not reach: too many requests were cut still waiting,
    so the value is the longest wait and the true percentile lies beyond it (TTFT only)."""

    @model_serializer(mode="wrap")
    def _lower_bound_only_when_some(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not self.lower_bound:
            data.pop("lower_bound", None)
        return data


class Requests(_Model):
    ok: int = 0
    failed: int = 0
    cancelled: int = 0
    abandoned: int = 0
    """Closed mid-stream by the client on purpose (``--abandon-rate``): neither failed nor cancelled."""
    dropped: int = 0
    """Open loop: arrivals not sent because the model's connection backoff was running (the server refused
    or reset connections); never sent, so not in ``total``."""

    @model_serializer(mode="wrap")
    def _dropped_only_when_some(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``dropped`` is written only when an arrival was dropped: the counts of a run whose server never went
        away read exactly as they always have."""
        data: dict[str, Any] = handler(self)
        if not self.dropped:
            data.pop("dropped", None)
        return data

    @property
    def total(self) -> int:
        return self.ok + self.failed + self.cancelled + self.abandoned


class Totals(_Model):
    """What one model (or one of its stages) did, with a :class:`Summary` per metric of the table.

    Each metric's ``results_field`` (``measure.metrics``) is a field here; the ones that other modules
    read by attribute are declared (typed), and the rest are kept as typed extras, written and read
    like any field (``totals.summary_of(field)``)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    __pydantic_extra__: dict[str, Summary] = Field(init=False)

    requests: Requests = Requests()
    errors: dict[str, int] = {}
    ttft_s: Summary = Summary()
    itl_s: Summary = Summary()
    tpot_s: Summary = Summary()
    e2e_s: Summary = Summary()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int | None = None
    """Sum of ``usage.prompt_tokens_details.cached_tokens``; None when no request here reported it
    (a server that reports 0 gives 0)."""
    estimated_tokens: bool = False
    """True when some token counts came from the local estimator (server sent no usage)."""
    output_tokens_per_s: float = 0.0
    requests_per_s: float = 0.0
    goodput_rps: float | None = None
    """Requests/s that met every SLO in the config; None when the config sets no SLO."""
    reasoning_tokens: int = 0
    """Output tokens streamed as reasoning deltas (a part of ``completion_tokens``), counted by the client."""
    reasoning_share: float | None = None
    """``reasoning_tokens / completion_tokens``; None when no output token was counted."""
    server_reasoning_tokens: int | None = None
    """The server's own ``reasoning_tokens`` (usage), summed over the requests that reported one; None
    when none did. Shown beside ``reasoning_tokens``, never in its place."""
    tokens_per_read_p50: float | None = None
    """Median tokens the client found in one read of a stream (1: token by token); None: no stream read."""
    censored: Censored = Censored()
    """Requests a stop cut, by whether their first token had come (TTFT counts both: ``measure.survival``)."""
    no_data_reason: str | None = None
    """Set with the ``no_data`` flag: why no request finished here, in words."""
    without_stalled: StalledExcluded | None = None
    """Set when a stalled worker's requests are in these latencies: the same percentiles without them."""
    tokens_per_step: float | None = None
    """Mean tokens per streamed event after the first: what one decode step sends a stream when the server
    writes each step as an event (1 + accepted drafts under speculative decoding); None: no stream read."""

    @model_validator(mode="before")
    @classmethod
    def _every_metric(cls, data: Any) -> Any:
        """Every metric of the table has its summary (an empty one where none was given); unknown keys
        that are not a metric's are dropped, as for every results object."""
        if not isinstance(data, dict):
            return data
        fields = {m.results_field for m in METRICS if m.results_field is not None}
        kept = {k: v for k, v in data.items() if k in cls.model_fields or k in fields}
        for name in fields:
            kept.setdefault(name, Summary())
        return kept

    def summary_of(self, field: str) -> Summary:
        """The summary in ``field`` (a metric's ``results_field``), declared or not."""
        value: Summary = getattr(self, field)
        return value


class PairedDiff(_Model):
    """Median of per-pair differences (this model − baseline) and its bootstrap CI, seconds."""

    median_diff: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0


class PairedSummary(_Model):
    """``--paired``: this model against the baseline (the config's first model), prompt by prompt."""

    baseline: str
    pairs: int = 0
    confidence: float = 0.95
    ttft_s: PairedDiff = PairedDiff()
    e2e_s: PairedDiff = PairedDiff()
    tpot_s: PairedDiff = PairedDiff()


class SweepSummary(_Model):
    """``--shape sweep``: the throughput knee and the highest rate held under the SLOs."""

    knee_users: int | None = None
    """Closed-loop users of this model at the knee."""
    knee_output_tokens_per_s: float | None = None
    knee_requests_per_s: float | None = None
    probe_output_tokens_per_s: list[float] = []
    rates_tried_rps: list[float] = []
    max_sustainable_rps: float | None = None


class TurnSummary(_Model):
    """Conversations: what turn ``turn`` (1-based) of every conversation did; cached tokens rise with it.

    ``requests`` counts successful and failed ones; the means are over successful requests."""

    turn: int
    requests: int = 0
    failed: int = 0
    prompt_tokens_mean: float | None = None
    cached_tokens_mean: float | None = None
    """Mean over the successful requests whose server reported cached tokens; None when none did."""
    ttft_s: Summary = Summary()
    itl_s: Summary = Summary()


class StepSummary(_Model):
    """Agent sessions: what step ``step`` (1-based) of every session did; the context grows by a tool
    result a step, and the cached tokens say whether the session's prefix stayed resident while its tool ran.

    ``requests`` counts successful and failed ones; the means are over successful requests."""

    step: int
    requests: int = 0
    failed: int = 0
    context_tokens: float | None = None
    """Mean prompt tokens of the step (messages and the ``tools`` array, as the server counted them)."""
    ttft_s: Summary = Summary()
    cached_tokens_mean: float | None = None
    """Mean over the successful requests whose server reported cached tokens; None when none did."""
    step_time_s: Summary = Summary()
    """The step's request, sent to last token (the tool time that follows is not in it)."""


class AgentSessionsSummary(_Model):
    """Agent sessions that ended during the run (one in flight at the stop is not counted)."""

    sessions: int = 0
    ended_steps: int = 0
    """Sessions that ran all their steps."""
    ended_context: int = 0
    """Sessions ended because the next step would not fit the model's ``max_context`` (counted, not failed)."""
    ended_failed: int = 0
    """Sessions ended by a failed step."""
    steps_completed_mean: float | None = None
    prompt_tokens_mean: float | None = None
    """Tokens in per session: the sum of its steps' prompts."""
    completion_tokens_mean: float | None = None
    """Tokens out per session."""
    duration_s: Summary = Summary()
    """First step sent to last answer."""


class PromptLengthBucket(_Model):
    """Successful requests whose prompt had more than ``min_tokens`` and at most ``max_tokens`` tokens."""

    min_tokens: int
    max_tokens: int
    requests: int = 0
    prompt_tokens_mean: float | None = None
    ttft_s: Summary = Summary()


class ServerBursts(_Model):
    """The server wrote several events per read while the client kept up (not client saturation)."""

    tokens_per_read_p50: float
    """The burst size: median tokens per read."""
    note: str
    """What it means for the numbers: ITL shows the server's flush cadence."""
    reason: Literal["flush", "speculation"] = "flush"
    """``speculation``: the server's own counters show speculative decoding, whose verify steps send
    1 + accepted drafts per write (ITL per token is the step's gap over its tokens)."""


class PrefillInterference(_Model):
    """``--shape interference:L``: what injected long prompts did to this model's decoders (docs/workloads.md)."""

    prefill_tokens: int
    """Prompt tokens of one injected request (the server's count where it reported usage)."""
    injections: int = 0
    itl_p50_baseline_s: float | None = None
    """ITL p50 of the decode gaps that overlapped no injected prefill."""
    itl_p50_during_s: float | None = None
    """ITL during an injected prefill (from its send to its first token): the median over (decode stream,
    window) pairs of the stream's mean ITL over its gaps overlapping the window."""
    itl_max_during_s: float | None = None
    ms_per_1k_prefill_tokens: float | None = None
    """What one decode stream lost per injection (Σ of its gaps in the window − the baseline's), ms per 1000
    injected prompt tokens: the wire's counterpart of ``attnload sim --explain``'s mixed-step stall."""
    injected_ttft_p50_s: float | None = None
    """TTFT p50 of the injected prompts: how long each window lasted."""
    itl_timeline: list[tuple[float, float]] = []
    """(seconds since the test began, mean decode ITL of the gaps ending in that half second): the report's chart."""
    windows_s: list[tuple[float, float]] = []
    """Each injected prefill's window (sent, first token), seconds since the test began."""


class StartSpreadInfo(_Model):
    """Closed loop: how a stage's new users were started (``--start-spread``) and how spread out they were."""

    mode: str
    """``auto``, ``off`` or ``fixed`` (a fixed number of seconds, ``seconds``)."""
    seconds: float | None = None
    """``fixed``: the duration the users' first requests were spread over."""
    users: int = 0
    """Users of this model whose first request was in this stage."""
    first_requests_spread_s: float | None = None
    """Measured: from the stage's first to its last new user's first request (None: under two users)."""


class StageSummary(Totals):
    """One stage of a shaped run: a closed-loop user count or an open-loop rate."""

    index: int = 0
    users: int | None = None
    """Closed loop: this model's own users in the stage (what it had, e.g. 4 of ``concurrency:8`` over two
    models; with ``--paired`` every user drives every model)."""
    users_total: int | None = None
    """Closed loop: the stage's users over all models, as the shape names them (``concurrency:8`` → 8)."""
    rate: float | None = None
    start_s: float = 0.0
    end_s: float = 0.0
    dispatch_lag_s: Summary | None = None
    flags: list[str] = []
    """E.g. ``client_behind`` (open loop could not keep the schedule)."""
    achieved_rate_rps: float | None = None
    """Open loop: requests sent (any outcome) per second of the stage, to compare with ``rate``."""
    arrivals: str | None = None
    """Open loop: the inter-arrival law, ``poisson``, ``gamma``, ``constant`` or ``trace`` (None: closed loop)."""
    burstiness: float | None = None
    """Open loop: the gamma shape of the gaps (``--burstiness``; Poisson is 1, constant and trace None)."""
    paired: PairedSummary | None = None
    server: ServerSummary | None = None
    """The model server's view of this stage; None where no server metrics were read."""
    gpu: GpuSummary | None = None
    """The model's GPUs over this stage; None where no GPU metrics were read."""
    server_gap_reasons: list[str] = []
    """Why the stage carries the ``server_client_gap`` flag (server and client disagree)."""
    trace_arrival_rate_per_s: float | None = None
    """Replay: the trace's own arrival rate at the replay speed."""
    achieved_rate_per_s: float | None = None
    """Replay: the arrival rate actually sent, ``(n − 1) / (last − first send)`` like the trace's."""
    context: int | None = None
    """A context ladder's rung: the prompt tokens every request of the stage asked for (None: not a ladder)."""
    prompt_tokens_p50: float | None = None
    """Measured prompt tokens per successful request, median (from ``usage``; beside ``context``)."""
    decode_tokens_per_s_per_user: float | None = None
    """Decode speed of one stream: 1 / TPOT p50 (output tokens/s per user)."""
    server_bursts: ServerBursts | None = None
    """Set with the ``server_bursts`` flag: the server's burst size and what it means for ITL."""
    start_spread: StartSpreadInfo | None = None
    """Closed loop: how this stage's new users were started (None: open loop, or no user started here)."""
    decode_fit: DecodeFitSummary | None = None
    """ITL against position (prompt + token index): the decode step against context (docs/microscope.md)."""
    evidence: Evidence | None = None
    """TTFT and TPOT medians with their samples and intervals: what a verdict figure from this stage rests on."""


class ContextPoint(_Model):
    """One rung of a model's ``context_scaling``: decode speed per user at ``context`` over the shortest rung's."""

    context: int
    users: int | None = None
    decode_tokens_per_s_per_user: float | None = None
    relative: float | None = None
    """This rung's decode speed ÷ the shortest context's at the same users (1.0 there; None: no TPOT)."""
    itl_p50_s: float | None = None
    ttft_p50_s: float | None = None
    prompt_tokens_p50: float | None = None
    change: Interval | None = None
    """``relative − 1`` with its 95 % interval and the sample behind it (None: no TPOT at one of the rungs)."""
    ttft: Interval | None = None
    """This rung's TTFT p50 with its 95 % interval and sample."""


class VerdictModel(_Model):
    """The decision for one model: its capacity at the SLO, per GPU, and its cost."""

    target: str
    context: int | None = None
    """The rung the capacity was found at (the longest one with a stage meeting the SLO; None: not a ladder)."""
    slo_met_users: int | None = None
    """Closed loop: the largest users of this model whose stage met the SLO at p99 with no failures."""
    slo_met_rate: float | None = None
    """Open loop: the largest rate (req/s) whose stage met the SLO at p99 with no failures."""
    gpus: int | None = None
    users_per_gpu: float | None = None
    output_tokens_per_s_per_gpu: float | None = None
    usd_per_mtok_output: float | None = None
    decode_change: Interval | None = None
    """A ladder: the change of per-user decode speed from the shortest to the longest rung (−0.3: fell 30 %)."""
    ttft_p50_s: Interval | None = None
    """TTFT p50 at the stage the figures come from (the longest rung of a ladder)."""
    tpot_p50_s: Interval | None = None
    """TPOT p50 at that stage."""
    tokens_per_step: float | None = None
    """Speculative decoding (the server's counters show it): the client's mean tokens per decode step."""
    spec_acceptance_rate: float | None = None
    """The server's per-token draft acceptance over the run (``server.spec_decode.acceptance_rate``)."""
    itl_p50_s: float | None = None
    """With speculation: ITL per token, p50, over the run."""
    baseline: str | None = None
    """The entry with the same model id that did not speculate, when both were run."""
    itl_speedup: float | None = None
    """The baseline's ITL p50 ÷ this model's: what speculation bought per token."""


class Verdict(_Model):
    """The answer first: what the run says, and for each model its capacity and cost (``results.verdict``)."""

    text: str = ""
    models: list[VerdictModel] = []


class ModelSummary(Totals):
    key: str
    model: str
    attention: str
    stages: list[StageSummary] = []
    profiles: dict[str, Totals] = {}
    attention_info: dict[str, float | int | str] = {}
    """KV bytes/token/GPU, capacity, parallelism when the model matches a simulator preset."""
    paired: PairedSummary | None = None
    """``--paired`` runs, non-baseline models: per-pair differences over all stages."""
    sweep: SweepSummary | None = None
    in_flight: int | None = None
    """Users running against this model when the summary was taken (live snapshots; 0 once stopped)."""
    server: ServerSummary | None = None
    """The model server's view over the whole run (counters: the sum of the stages'); None: not read."""
    gpu: GpuSummary | None = None
    """The model's GPUs over the whole run; None: not read."""
    turns: list[TurnSummary] = []
    """Conversation runs: one row per turn index."""
    steps: list[StepSummary] = []
    """Agent runs: one row per step index."""
    agent_sessions: AgentSessionsSummary | None = None
    """Agent runs: per-session duration, steps and tokens; None without agent sessions."""
    ttft_by_prompt_tokens: list[PromptLengthBucket] = []
    """TTFT against prompt length, in power-of-two token buckets."""
    context_scaling: list[ContextPoint] = []
    """A context ladder: each stage's per-user decode speed relative to the shortest context's (same users)."""
    reasoning_note: str | None = None
    """Set when the server's reasoning count disagrees with the streamed one: both numbers, in words."""
    server_bursts: ServerBursts | None = None
    """Over the whole run: the server wrote several events per read while the client kept up."""
    flags: list[str] = []
    """E.g. ``no_data`` (no request of this model finished) or ``worker_stalled`` (a run without stages)."""
    error_examples: dict[str, list[ErrorExample]] = {}
    """Per error class, its first three failures as the server answered them."""
    prefill_interference: PrefillInterference | None = None
    """``--shape interference:L``: decode ITL without and during injected prefills; None for other shapes."""
    start_spread: StartSpreadInfo | None = None
    """An unstaged closed-loop run: how its users were started (a staged run says it per stage)."""
    kv_read: KvRead | None = None
    """A decode sweep's KV bytes read per token per GPU, measured against the KV math (docs/microscope.md)."""
    kv_capacity: KvCapacity | None = None
    """A capacity probe's sequences and KV tokens served at once, against the KV math (docs/microscope.md)."""
    target: str = ""
    """The config key again, named as the Prometheus ``target`` label: what tells apart two entries
    with one model id (e.g. the same model on vLLM and on SGLang)."""
    prompt_sizes: Literal["exact", "calibrated", "estimated"] = "estimated"
    """How sized prompts met their token targets: ``exact`` (the model's ``tokenizer``), ``calibrated``
    (sized by the server-counted ÷ estimated ratio learned from its first answers' usage) or
    ``estimated`` (the 4-bytes-a-token estimator alone: no tokenizer, no usage to learn from)."""


class ClientInfo(_Model):
    workers: int = 0
    workers_lost: int = 0
    cpu_max_ratio: float = 0.0
    client_saturated: bool = False
    saturation_reasons: list[str] = []
    users_started: int = 0
    """Closed-loop users started, over all workers (with ``users_crashed``: did every user crash?)."""
    users_crashed: int = 0
    """Users that raised instead of sending (a bug or a config value no request can be built from)."""
    scheduler_error: str | None = None
    """Open loop: why a worker's arrival scheduler died (the first one seen); None when none did."""
    lost_workers: list[LostWorker] = []
    """Workers that went missing and never came back, each with the traffic it never reported."""
    workers_stalled: int = 0
    """Workers that froze and came back (``stalled_workers`` has each freeze)."""
    stalled_workers: list[StalledWorker] = []
    """Freezes of workers that came back (not lost; ``workers_lost`` does not count them)."""
    refused_workers: list[RefusedWorker] = []
    """Joining workers whose config hash or attnload version differed from the master's."""
    loop_lag_s: dict[str, Summary] = {}
    """Per sending process (worker id; ``local`` for a single process): how late its event loop ran a
    50 ms timer, seconds. A p50 of a few ms or a p99 near 100 ms: the client was behind."""


class RequestsOut(_Model):
    """``--requests-out``: where the per-request lines went and how many (docs/requests.md)."""

    path: str
    schema_: str = Field(default="attnload.requests/v1", alias="schema")
    records: int = 0
    """Lines written: with ``dropped``, every request of the results, warm-up included."""
    dropped: int = 0
    """Lines a worker could not hold until its next report (counted, never silently lost)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)


class Results(_Model):
    """A finished run; written as ``results/<timestamp>.json``."""

    schema_: Literal["attnload.results/v1"] = Field(default=SCHEMA, alias="schema")
    started_at: str
    ended_at: str
    duration_s: float
    config_sha256: str
    config: dict[str, object] = {}
    """What was run: source file, shape, users, profiles (never keys)."""
    client: ClientInfo = ClientInfo()
    models: list[ModelSummary]
    interrupted: bool = False
    """True when the run did not reach its end: stopped by SIGTERM/SIGINT, or a periodic snapshot
    (``STAMP.json`` rewritten every ``--snapshot-interval``) left behind by a master that was killed."""
    requests_out: RequestsOut | None = None
    """The per-request JSONL of ``--requests-out``; None when not asked for."""
    snapshot: bool = False
    """True in a periodic snapshot (``--snapshot-interval``), which the final write replaces: a file still
    marked so is what a killed master left. False in the final results, complete even when ``interrupted``."""
    verdict: Verdict | None = None
    """The decision the run supports (or what is missing for one); written first by the console and HTML."""
    partial: Partial | None = None
    """Set when some worker's final counts never arrived (it was lost, or silent at the end): which
    workers, and the window of each that is missing. None: every worker's counts are in."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    def model(self, key: str) -> ModelSummary:
        for summary in self.models:
            if summary.key == key:
                return summary
        raise KeyError(key)


def load_results(path: str | Path) -> Results:
    """Read a results file; a missing, corrupt or foreign file is a one-line :class:`UsageError`."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"results file {file} not found: pass the JSON that `attnload run` wrote under results/")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{file}: not valid JSON ({exc}); pass a results file written by attnload") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise UsageError(f"{file}: schema is {found!r}, expected {SCHEMA!r}; pass a results file written by attnload")
    return validated(Results, data, file, "; the file is damaged or from another tool")
