"""Four things a real vLLM showed, fixed in attnload's own code and checked here without one:

1. cached prompt tokens the server did not report are ``null``, never 0;
2. ``stages[].users`` is each model's own concurrency (``users_total`` the stage's);
3. closed-loop users started together are spread (``--start-spread``; unit level here, arrival
   times at a real server in tests/e2e/test_start_spread_e2e.py);
4. a server quantile from a coarse histogram bucket reads as its bucket, and the gap check knows it.

Recorded wire formats: vLLM's ``vllm:time_to_first_token_seconds`` bucket bounds and its usage object
without ``prompt_tokens_details`` (what it sends unless started with ``--enable-prompt-tokens-details``).
"""

from __future__ import annotations

import time
from pathlib import Path

import gevent
import pytest
from rich.console import Console

from attnload.client.chat import cached_tokens
from attnload.config.load import load_config
from attnload.errors import UsageError
from attnload.measure.context import ContextRecorder
from attnload.measure.recorder import Recorder, RequestRecord
from attnload.plan.options import parse_start_spread
from attnload.report import render_html
from attnload.report.console import render_table
from attnload.report.server import console_table, live_cells, server_ttft
from attnload.report.turns import PROMPT_DETAILS_FLAG, cached_notes, turn_table
from attnload.results.context import context_fields
from attnload.results.model import ClientInfo, Results, ServerSummary, StageSummary, Summary, TurnSummary
from attnload.results.server import gap_reasons, is_wide, ttft_text
from attnload.results.summarize import RunFacts, StageWindow, build_results, split_users, stage_users
from attnload.runner.collector.channels import ContextPart
from attnload.runner.messages import pace_exchange
from attnload.runner.sender.startspread import PilotBoard, StartSpread, offset_fraction
from attnload.scrape.window import histogram_bucket, histogram_quantile
from helpers.results import gqa_model, mla_model, results, stage

VLLM_TTFT_BOUNDS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
"""vLLM's TTFT histogram buckets (vllm/v1/metrics/loggers.py), as tests/data/scrape/ records them."""


def _config(tmp_path: Path, weights: tuple[float, float] = (1.0, 1.0)) -> object:
    path = tmp_path / "c.json"
    path.write_text(
        '{"base_url": "http://127.0.0.1:9/api", "models": {'
        f'"g": {{"id": "llama-3-70b", "attention_type": "GQA", "weight": {weights[0]}}}, '
        f'"m": {{"id": "deepseek-v3", "attention_type": "MLA", "weight": {weights[1]}}}}}}}'
    )
    return load_config(path)


def _record(
    model: str, cached: int | None, turn: int | None = None, stage: int = 0, e2e: float = 1.0, outcome: str = "ok"
) -> RequestRecord:
    return RequestRecord(
        model_key=model,
        profile="p",
        stage=stage,
        outcome=outcome,
        error=None,
        ttft_s=0.1,
        itl_samples=((0.01, 1),),
        e2e_s=e2e,
        prompt_tokens=100,
        completion_tokens=2,
        cached_prompt_tokens=cached,
        tokens_estimated=False,
        turn=turn,
    )


# ----------------------------------------------------------------------------- 1. absent is not zero


def test_cached_tokens_absent_is_none_and_a_reported_zero_stays_zero() -> None:
    assert cached_tokens({}) is None  # vLLM without --enable-prompt-tokens-details: no details at all
    assert cached_tokens(None) is None and cached_tokens({"cached_tokens": None}) is None
    assert cached_tokens({"cached_tokens": 0}) == 0
    assert cached_tokens({"cached_tokens": 96}) == 96
    assert cached_tokens({"cached_tokens": "96"}) is None and cached_tokens({"cached_tokens": True}) is None


def test_totals_and_turn_means_count_only_reported_values(tmp_path: Path) -> None:
    recorder, context = Recorder(), ContextRecorder()
    rows = [
        ("g", None, 1),
        ("g", None, 2),
        ("g", None, 2),  # GQA's server reports nothing
        ("m", 0, 1),
        ("m", 64, 2),
        ("m", None, 2),
        ("m", 32, 2),
    ]  # MLA's reports (one request did not)
    for model, cached, turn in rows:
        record = _record(model, cached, turn)
        recorder.add(record)
        context.add(record)
    run = RunFacts(
        config=_config(tmp_path),  # type: ignore[arg-type]
        recorder=recorder,
        started_at=0.0,
        ended_at=10.0,
        stages=[StageWindow(0, 0.0, 10.0, users=2)],
        client=_client(),
        run_info={},
    )
    data = build_results(run, [ContextPart(context, trace_rate_per_s=None)])
    gqa, mla = data.model("g"), data.model("m")
    assert gqa.cached_prompt_tokens is None and gqa.stages[0].cached_prompt_tokens is None
    assert [t.cached_tokens_mean for t in gqa.turns] == [None, None]
    assert mla.cached_prompt_tokens == 96 and mla.stages[0].cached_prompt_tokens == 96
    assert [t.cached_tokens_mean for t in mla.turns] == [0.0, 48.0]  # turn 2: (64 + 32) / 2 reporting requests
    # merged from workers: the reported count travels with the sum
    master = ContextRecorder()
    master.merge_delta(context.take_delta())
    assert [t.cached_tokens_mean for t in context_fields(master, "m")["turns"]] == [0.0, 48.0]
    assert Results.model_validate_json(data.to_json()).model("g").cached_prompt_tokens is None


def _client() -> ClientInfo:
    return ClientInfo(workers=1)


def _conversation_results(hit_ratio: float | None) -> Results:
    base = results(gqa_model(), mla_model())
    gqa = base.models[0].model_copy(
        update={
            "turns": [
                TurnSummary(turn=1, requests=5, prompt_tokens_mean=100.0),
                TurnSummary(turn=2, requests=5, prompt_tokens_mean=180.0),
            ],
            "server": ServerSummary(source="vllm", prefix_cache_hit_ratio=hit_ratio),
        }
    )
    mla = base.models[1].model_copy(
        update={
            "turns": [
                TurnSummary(turn=1, requests=5, prompt_tokens_mean=100.0, cached_tokens_mean=0.0),
                TurnSummary(turn=2, requests=5, prompt_tokens_mean=180.0, cached_tokens_mean=96.0),
            ]
        }
    )
    return base.model_copy(update={"models": [gqa, mla]})


def test_console_and_html_name_the_flag_and_show_the_servers_hit_ratio() -> None:
    data = _conversation_results(0.31)
    notes = cached_notes(data)
    assert len(notes) == 1 and notes[0].startswith("llama-3-70b:")  # the model that reported nothing
    assert PROMPT_DETAILS_FLAG in notes[0] and "31%" in notes[0]
    console = Console(width=200, record=True)
    console.print(render_table(data))
    text = console.export_text()
    assert "--enable-prompt-tokens-details" in text and "hit ratio over the run: 31%" in text
    table = turn_table(data)
    assert "--enable-prompt-tokens-details" in table and 'id="turn-prefix-cache"' in table
    assert "llama-3-70b 31%" in table
    gqa_rows = [r for r in table.split("<tr ") if 'data-model="llama-3-70b"' in r]
    assert gqa_rows and all('<td class="num">0</td>' not in r for r in gqa_rows)  # absent, not 0
    assert "—" in gqa_rows[0]
    html = render_html(data)
    assert "--enable-prompt-tokens-details" in html
    assert "not read" in cached_notes(_conversation_results(None))[0]


# ----------------------------------------------------------------------------- 2. per-model stage users


def test_split_users_follows_the_runners_round_robin(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert [split_users(n, config, False) for n in (2, 8)] == [{"g": 1, "m": 1}, {"g": 4, "m": 4}]  # type: ignore[arg-type]
    assert split_users(8, config, True) == {"g": 8, "m": 8}  # type: ignore[arg-type]  # --paired
    weighted = _config(tmp_path, (3.0, 1.0))
    assert split_users(8, weighted, False) == {"g": 6, "m": 2}  # type: ignore[arg-type]


def test_stage_users_prefers_what_the_runner_sampled(tmp_path: Path) -> None:
    config = _config(tmp_path)
    sampled = StageWindow(1, 0.0, 5.0, users=8, model_users={"g": 5, "m": 3})
    assert stage_users(sampled, config, "g", False) == 5 and stage_users(sampled, config, "m", False) == 3  # type: ignore[arg-type]
    assert stage_users(StageWindow(1, 0.0, 5.0, users=8), config, "m", False) == 4  # type: ignore[arg-type]
    assert stage_users(StageWindow(1, 0.0, 5.0, rate=2.0), config, "m", False) is None  # type: ignore[arg-type]
    recorder = Recorder()
    for stage_index in (0, 1):
        recorder.add(_record("g", 0, stage=stage_index))
    windows = [
        StageWindow(0, 0.0, 5.0, users=2, model_users={"g": 1, "m": 1}),
        StageWindow(1, 5.0, 10.0, users=8, model_users={"g": 4, "m": 4}),
    ]
    run = RunFacts(
        config=config,  # type: ignore[arg-type]
        recorder=recorder,
        started_at=0.0,
        ended_at=10.0,
        stages=windows,
        client=_client(),
        run_info={},
    )
    data = build_results(run)
    assert [(s.users, s.users_total) for s in data.model("g").stages] == [(1, 2), (4, 8)]
    console = Console(width=200, record=True)
    console.print(render_table(data))
    text = console.export_text()
    assert "4 users" in text and "8 users" not in text  # the per-model rows read the model's own users


# ----------------------------------------------------------------------------- 3. start spread


def test_golden_offsets_span_more_than_half_a_duration_for_every_small_group() -> None:
    for users in range(3, 33):
        phases = [0.0] + [offset_fraction(j) for j in range(1, users)]  # the pilot is phase 0
        assert max(phases) - min(phases) >= 0.5, users
    for workers in (1, 2, 3, 4):  # interleaved by worker index: j = 1 + n·W + w stays distinct
        js = {1 + n * workers + w for w in range(workers) for n in range(4)}
        assert len(js) == 4 * workers


def test_parse_start_spread() -> None:
    assert parse_start_spread(None) == "auto" and parse_start_spread("auto") == "auto"
    assert parse_start_spread("off") == "off" and parse_start_spread("0") == "off"
    assert parse_start_spread("2.5") == 2.5 and parse_start_spread("3s") == 3.0
    for bad in ("soon", "-1", "inf", "nan", "0.01", "1e9"):
        with pytest.raises(UsageError, match="--start-spread"):
            parse_start_spread(bad)


def _spread(mode: str | float = "auto", stage_s: float = 60.0) -> StartSpread:
    return StartSpread(mode, stage_duration_s=stage_s, seed=0, recorder=Recorder(), placement=lambda: (0, 1))


def test_first_stage_pilot_then_offsets_of_its_duration() -> None:
    """One process, four users started together: the pilot goes at once, the others at f·D after its answer."""
    spread = _spread()
    started = time.perf_counter()
    sent: dict[int, float] = {}

    def user(i: int) -> None:
        pilot = spread.first_request("g", 0, ["g"])
        sent[i] = time.perf_counter() - started
        if pilot:
            gevent.sleep(0.4)  # the pilot's first request
            spread.pilot_done("g", ["g"], 0.4)

    gevent.joinall([gevent.spawn(user, i) for i in range(4)], timeout=10)
    ordered = sorted(sent.values())
    assert ordered[0] < 0.1  # the pilot
    after = [t - 0.4 for t in ordered[1:]]  # the others, from the pilot's answer
    assert after == pytest.approx([0.236 * 0.4, 0.618 * 0.4, 0.854 * 0.4], abs=0.08)


def test_later_stage_uses_the_observed_e2e_and_off_waits_for_nothing() -> None:
    spread = _spread()
    spread.recorder.add(_record("g", 0, stage=0, e2e=0.5))
    spread.recorder.add(_record("g", 0, stage=1, e2e=0.3))  # the most recent stage decides
    started = time.perf_counter()
    assert spread.first_request("g", 2, ["g"]) is False  # D known: no pilot
    waited = time.perf_counter() - started
    assert 0 <= waited <= 0.3 + 0.05
    off = _spread("off")
    started = time.perf_counter()
    assert [off.first_request("g", 0, ["g"]) for _ in range(3)] == [False] * 3
    assert time.perf_counter() - started < 0.05


def test_a_pilot_that_never_answers_releases_the_others_at_the_cap() -> None:
    spread = _spread(stage_s=4.0)  # cap: max(1 s, 25 % of 4 s) = 1 s
    assert spread.first_request("g", 0, ["g"]) is True
    started = time.perf_counter()
    assert spread.first_request("g", 0, ["g"]) is False
    assert 1.0 <= time.perf_counter() - started <= 1.0 + 0.618 + 0.2


def test_master_names_one_pilot_per_model_and_relays_its_duration() -> None:
    master = PilotBoard()
    assert master.on_claim("g", "w1") == (True, None)
    assert master.on_claim("g", "w2")[0] is False
    assert master.on_claim("m", "w2")[0] is True  # each model has its own pilot
    master.learn("g", 2.9)
    assert master.on_claim("g", "w3") == (False, 2.9)


class _MessageLog:
    """A worker runner's messaging, recorded: what it sends, and the handlers it registers."""

    def __init__(self, sent: list[tuple[str, dict[str, object]]]) -> None:
        self.sent = sent
        self.handlers: dict[str, object] = {}

    def send_message(self, kind: str, data: dict[str, object]) -> None:
        self.sent.append((kind, data))

    def register_message(self, kind: str, handler: object) -> None:
        self.handlers[kind] = handler


def test_worker_claims_through_the_master() -> None:
    sent: list[tuple[str, dict[str, object]]] = []
    worker = StartSpread("auto", stage_duration_s=60.0, seed=0, recorder=Recorder(), placement=lambda: (1, 2))
    pace_exchange(_MessageLog(sent), worker, None)
    answer = gevent.spawn(worker.first_request, "g", 0, ["g"])
    gevent.sleep(0.01)
    assert sent == [("attnload_pace_claim", {"key": "g"})]
    worker.on_claimed({"key": "g", "pilot": False, "d": 0.2})  # another worker's pilot already answered
    assert answer.get(timeout=2) is False


# ----------------------------------------------------------------------------- 4. coarse server buckets


def _cumulative(counts: dict[float, int]) -> list[tuple[float, float]]:
    out, total = [], 0
    for bound in (*VLLM_TTFT_BOUNDS_S, float("inf")):
        total += counts.get(bound, 0)
        out.append((bound, float(total)))
    return out


def test_bucket_of_a_quantile_on_vllms_bounds() -> None:
    buckets = _cumulative({0.1: 40, 0.25: 60})  # every TTFT between 100 and 250 ms except the first 40
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.15 * 10 / 60)
    assert histogram_bucket(0.5, buckets) == (0.1, 0.25)
    assert histogram_bucket(0.2, buckets) == (0.08, 0.1)
    assert histogram_bucket(0.5, _cumulative({float("inf"): 10})) == (2560.0, None)
    assert histogram_bucket(0.5, _cumulative({})) is None
    assert is_wide((0.1, 0.25)) and is_wide((0.0, 0.001)) and is_wide((2560.0, None))
    assert not is_wide((0.08, 0.1))  # 1.25×: narrow enough to print the value
    assert server_ttft(0.175, (0.1, 0.25)) == "100–250" and server_ttft(0.09, (0.08, 0.1)) == "90.0"
    assert ttft_text(0.175, (0.1, 0.25)) == "100–250 ms" and ttft_text(0.175, None) == "175 ms"


def _stage_with(client_p50: float, server: ServerSummary) -> StageSummary:
    summary = Summary(count=100, mean=client_p50, p50=client_p50, p99=client_p50 * 2, max=client_p50 * 3)
    return stage(0, 4, client_p50, 0.02, 100.0).model_copy(update={"ttft_s": summary, "server": server})


def test_gap_check_is_bucket_aware() -> None:
    # the case: client 119 ms, server 100-250 ms interpolated as 175: no gap (and none before)
    assert gap_reasons(_stage_with(0.119, _server(0.175, (0.1, 0.25))), _server(0.175, (0.1, 0.25))) == []
    # inside a wide bucket: the interpolated 1.2 s is below half the client's 2.45 s, but 2.45 s is in 1-2.5 s
    inside = _server(1.2, (1.0, 2.5))
    assert gap_reasons(_stage_with(2.45, inside), inside) == []
    assert gap_reasons(_stage_with(2.45, _server(1.2, None)), _server(1.2, None))  # without the bucket: flagged
    # beside it, within twice the bucket's edge: 0.45 interpolated in 250-500 ms vs client 0.2 s
    beside = _server(0.45, (0.25, 0.5))
    assert gap_reasons(_stage_with(0.2, beside), beside) == []
    # a real gap is still one, and reads as the bucket
    far = _server(0.015, (0.01, 0.02))
    reasons = gap_reasons(_stage_with(0.5, far), far)
    assert len(reasons) == 1 and "10–20 ms < half the client's 500 ms" in reasons[0]


def _server(p50: float, bucket: tuple[float, float | None] | None) -> ServerSummary:
    return ServerSummary(source="vllm", samples=5, ttft_p50_s=p50, ttft_p50_bucket_s=bucket)


def test_console_html_and_tab_show_the_range() -> None:
    base = results(gqa_model(), mla_model())
    server = _server(0.175, (0.1, 0.25))
    staged = [s.model_copy(update={"server": server}) for s in base.models[0].stages]
    data = base.model_copy(update={"models": [base.models[0].model_copy(update={"stages": staged}), base.models[1]]})
    console = Console(width=220, record=True)
    table = console_table(data)
    assert table is not None
    console.print(table)
    assert "100–250" in console.export_text() and "175.0" not in console.export_text()
    html = render_html(data)
    assert "100–250" in html and 'data-value="0.175"' in html  # the number stays in the data
    assert live_cells(staged[0])["server_ttft_p50_ms"] == "100–250"
    narrow = staged[0].model_copy(update={"server": _server(0.09, (0.08, 0.1))})
    assert live_cells(narrow)["server_ttft_p50_ms"] == "90.0"
    loaded = Results.model_validate_json(data.to_json())
    assert loaded.models[0].stages[0].server.ttft_p50_bucket_s == (0.1, 0.25)  # type: ignore[union-attr]
