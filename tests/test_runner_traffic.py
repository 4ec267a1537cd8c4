"""Unit tests of real chat traffic in the run: config keys, sessions (paired too), replay
schedule and shape, the turn / prompt-length recorder and how results and reports show them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnload.config.load import load_config
from attnload.errors import UsageError
from attnload.measure.context import ContextRecorder, prompt_bucket
from attnload.measure.recorder import RequestRecord
from attnload.report import render_html
from attnload.report.live.webui import llm_rows
from attnload.results.context import context_fields
from attnload.results.model import PromptLengthBucket, TurnSummary
from attnload.runner.sender.dialogs import Traffic
from attnload.runner.sender.openloop import PAIR_STREAM, OpenStage
from attnload.runner.sender.replay import ReplaySchedule
from attnload.workload.prompts import Workload
from attnload.workload.shapes import REPLAY_LEAD_S, ReplaySpec, parse_shape, with_replay_speed
from attnload.workload.trace import load_trace
from helpers.results import gqa_model, mla_model, results, summary

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "examples" / "traces" / "mooncake_sample.jsonl"
SHAREGPT = ROOT / "examples" / "datasets" / "chat_sample.sharegpt.json"


def write(tmp_path: Path, workload: dict[str, object], **models: dict[str, object]) -> Path:
    data = {
        "base_url": "http://127.0.0.1:9/api",
        "seed": 3,
        "workload": workload,
        "models": models
        or {
            "g": {"id": "llama-3-70b", "attention_type": "GQA"},
            "m": {"id": "deepseek-v3", "attention_type": "MLA", "max_context": 100000},
        },
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def record(
    model: str,
    turn: int | None,
    prompt: int,
    cached: int,
    ttft: float,
    outcome: str = "ok",
    sent_at: float | None = None,
) -> RequestRecord:
    return RequestRecord(
        model_key=model,
        profile="p",
        stage=0,
        outcome=outcome,
        error=None,
        ttft_s=ttft,
        itl_samples=((0.01, 1),),
        e2e_s=ttft + 0.01,
        prompt_tokens=prompt,
        completion_tokens=2,
        cached_prompt_tokens=cached,
        tokens_estimated=False,
        turn=turn,
        sent_at=sent_at,
    )


# ----------------------------------------------------------------------------- config


def test_config_keys_conversation_dataset_and_tokenizer(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        {
            "chat": {
                "conversation": {
                    "turns": {"dist": "uniform", "min": 2, "max": 4},
                    "think_time_s": {"dist": "exponential", "mean": 1.5},
                    "user_tokens": 50,
                }
            },
            "data": {"dataset": {"path": str(SHAREGPT), "turns": "all"}},
        },
        g={"id": "llama-3-70b", "attention_type": "GQA", "tokenizer": "/models/tok.json"},
    )
    config = load_config(path)
    chat, data = config.profile("chat"), config.profile("data")
    assert chat.conversational and data.conversational
    assert chat.conversation is not None and chat.conversation.think_time_s.mean == 1.5  # type: ignore[union-attr]
    assert data.dataset is not None and data.dataset.turns == "all" and data.dataset.output_tokens == "dataset"
    assert config.model("g").tokenizer == "/models/tok.json"


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"conversation": {"turns": 3}}, "user_tokens"),
        ({"conversation": {"turns": 0, "user_tokens": 5}}, "at least 1"),
        ({"dataset": {"path": "x.jsonl", "format": "csv"}}, "format"),
    ],
)
def test_bad_traffic_keys_are_one_line(tmp_path: Path, profile: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as error:
        load_config(write(tmp_path, {"p": profile}))
    assert message in str(error.value) and "\n" not in str(error.value)


# ----------------------------------------------------------------------------- sessions


def reply(model: str, text: str, outcome: str = "ok") -> RequestRecord:
    base = record(model, 1, 10, 0, 0.1, outcome)
    return RequestRecord(**{**base.__dict__, "reply_text": text if outcome == "ok" else None})


def test_paired_session_same_script_each_model_its_own_history(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path, {"chat": {"conversation": {"turns": 3, "think_time_s": 0.25, "user_tokens": 30}, "max_tokens": 7}}
        )
    )
    traffic = Traffic(config, Workload(config), lambda: (0, 1))
    session = traffic.session(["g", "m"])
    first = session.next()
    assert first.think_s == 0.0 and first.plans["g"].messages == first.plans["m"].messages
    assert first.plans["g"].turn == 1 and first.plans["g"].max_tokens == 7
    session.replied({"g": reply("g", "from g "), "m": reply("m", "from m\n")})
    second = session.next()
    assert second.think_s == 0.25
    g, m = second.plans["g"].messages, second.plans["m"].messages
    assert g[1] == {"role": "assistant", "content": "from g "} and m[1] == {"role": "assistant", "content": "from m\n"}
    assert g[2] == m[2] and g[2]["role"] == "user" and second.plans["g"].turn == 2
    session.replied({"g": reply("g", "x"), "m": reply("m", "y", outcome="failed")})
    assert not session.continues()  # one model's failure ends the pair's conversation
    third = session.next()
    assert third.plans["g"].turn == 1 and third.plans["g"].messages[0] != g[0]  # a new salt


def test_dataset_sessions_shard_records_by_worker(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {"d": {"dataset": {"path": str(SHAREGPT)}}}))
    firsts = []
    for shard in range(2):
        traffic = Traffic(config, Workload(config), lambda shard=shard: (shard, 2))
        session = traffic.session(["g"])
        seen = []
        for _ in range(15):
            step = session.next()
            seen.append(step.plans["g"].messages[-1]["content"][19:])
            session.replied({"g": reply("g", "ok")})
            session.dialog = None  # turns "first": one request per record
        firsts.append(seen)
    assert len(set(firsts[0]) | set(firsts[1])) == 30  # two workers, 30 records: every record once


# ----------------------------------------------------------------------------- replay


def test_replay_shape_parses_the_trace_and_applies_the_speed() -> None:
    spec = parse_shape(f"replay:{TRACE}", 5.0)
    trace = load_trace(TRACE)
    assert isinstance(spec, ReplaySpec) and spec.requests == 40 and spec.span_s == trace.duration_s
    fast = with_replay_speed(spec, "2")
    assert isinstance(fast, ReplaySpec)
    assert fast.replay_s - REPLAY_LEAD_S == pytest.approx(trace.duration_s / 2)
    assert fast.duration_s == pytest.approx(fast.replay_s + 5.0) and fast.to_text() == f"replay:{TRACE}"
    assert fast.stages[0].rate == pytest.approx(trace.arrival_rate_per_s * 2)
    with pytest.raises(UsageError, match="replay:PATH only"):
        with_replay_speed(parse_shape("rate:1", 5.0), "2")
    with pytest.raises(UsageError, match="no such file"):
        parse_shape("replay:/nonexistent/trace.jsonl", 5.0)
    with pytest.raises(UsageError, match="above 0"):
        with_replay_speed(spec, "0")


def test_replay_schedule_every_line_to_every_model_once_across_workers() -> None:
    spec = with_replay_speed(parse_shape(f"replay:{TRACE}", 5.0), 2)
    assert isinstance(spec, ReplaySpec)
    trace = load_trace(TRACE, 2)
    sent: list[tuple[float, str, int, str]] = []
    for share in range(3):
        schedule = ReplaySchedule(spec, ["g", "m"], False, lambda: "[0123456789abcdef] ")
        stage = OpenStage(0, {}, 100.0, 10.0, 0.0, share, 3)
        sent += [(t, s, p.max_tokens, p.messages[0]["content"]) for t, s, p in schedule(stage)]
    assert len(sent) == 80
    for key in ("g", "m"):
        mine = sorted((t, n) for t, s, n, _ in sent if s == key)
        assert [t for t, _ in mine] == pytest.approx([100.0 + REPLAY_LEAD_S + r.offset_s for r in trace.requests])
        assert sorted(n for _, n in mine) == sorted(r.output_tokens for r in trace.requests)
    by_line = {}
    for t, _s, _n, text in sent:
        by_line.setdefault(t, set()).add(text)
    assert all(len(texts) == 1 for texts in by_line.values())  # both models get the same prompt
    paired = ReplaySchedule(spec, ["g", "m"], True, lambda: "[0123456789abcdef] ")
    assert {s for _, s, _ in paired(OpenStage(0, {}, 0.0, 1.0, 0.0, 0, 1))} == {PAIR_STREAM}


# ----------------------------------------------------------------------------- recorder and results


def test_context_recorder_merges_worker_deltas_into_the_turn_table() -> None:
    workers = [ContextRecorder(), ContextRecorder()]
    workers[0].add(record("g", 1, 100, 0, 0.05, sent_at=1000.0))
    workers[0].add(record("g", 2, 300, 96, 0.07, sent_at=1001.0))
    workers[1].add(record("g", 1, 120, 0, 0.06, sent_at=1002.0))
    workers[1].add(record("g", 2, 340, 112, 0.08, outcome="failed", sent_at=1004.0))
    workers[1].add(record("g", None, 5000, 0, 0.5, sent_at=1003.0))
    master = ContextRecorder()
    for worker in workers:
        master.merge_delta(json.loads(json.dumps(worker.take_delta())))  # through the wire format
    fields = context_fields(master, "g")
    turns = {row.turn: row for row in fields["turns"]}
    assert set(turns) == {1, 2}
    assert turns[1].requests == 2 and turns[1].prompt_tokens_mean == 110 and turns[1].ttft_s.count == 2
    assert turns[2].requests == 2 and turns[2].failed == 1 and turns[2].cached_tokens_mean == 96
    assert turns[2].prompt_tokens_mean == 300
    buckets = fields["ttft_by_prompt_tokens"]
    assert [(b.min_tokens, b.max_tokens, b.requests) for b in buckets] == [(0, 128, 2), (256, 512, 1), (4096, 8192, 1)]
    sends = master.sent("g", 0)
    assert sends is not None and sends.count == 5 and sends.rate_per_s == pytest.approx(4 / 4.0)
    assert prompt_bucket(128) == (0, 128) and prompt_bucket(129) == (128, 256)


def test_report_and_web_ui_show_turns_and_ttft_by_context() -> None:
    turn_rows = [
        TurnSummary(
            turn=t,
            requests=10,
            prompt_tokens_mean=100.0 * t,
            cached_tokens_mean=90.0 * (t - 1),
            ttft_s=summary(0.01 * t),
            itl_s=summary(0.005),
        )
        for t in (1, 2, 3)
    ]
    buckets = [
        PromptLengthBucket(
            min_tokens=lo,
            max_tokens=lo * 2 or 128,
            requests=5,
            prompt_tokens_mean=lo + 50.0,
            ttft_s=summary(0.02 + lo / 1e5),
        )
        for lo in (0, 128, 256)
    ]
    gqa = gqa_model().model_copy(update={"turns": turn_rows, "ttft_by_prompt_tokens": buckets})
    mla = mla_model().model_copy(update={"turns": turn_rows, "ttft_by_prompt_tokens": buckets})
    data = results(gqa, mla)
    html = render_html(data)
    assert 'id="turn-table"' in html and 'data-turn="3"' in html and 'id="plot-ttft-context"' in html
    rows = [r for r in llm_rows(data) if str(r["stage"]).startswith("turn")]
    assert len(rows) == 6 and rows[2]["stage"] == "turn 3" and rows[2]["cached_tokens"] == "180"
    again = type(data).model_validate_json(data.to_json())
    assert again.models[0].turns[2].ttft_s.p50 == pytest.approx(0.03)
