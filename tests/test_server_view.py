"""Issue 16 in the run: config key, flags, the master's ServerView, results, agreement check, reports.

The poller and parser have their own tests (test_server_metrics.py); here the pieces that
carry their output into a run's results and every rendering of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from attnload.config.load import load_config
from attnload.errors import UsageError
from attnload.plan.options import OPTION, server_metrics_interval, server_metrics_mode
from attnload.report import print_summary, render_html
from attnload.report.explain import explain
from attnload.report.live.webui import llm_rows
from attnload.results.model import GaugeSummary, Results, ServerSummary, StageSummary
from attnload.results.server import SERVER_GAP_FLAG, ServerResults, gap_reasons, token_allowance, with_server
from attnload.runner.collector.serverview import ServerView, scrape_targets
from helpers.results import gqa_model, mla_model, results, stage

DATA = Path(__file__).parent / "data" / "server_metrics"


def _json(tmp_path: Path, **model: object) -> Path:
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "base_url": "http://10.0.0.5:8000/api",
                "models": {
                    "gqa": {"id": "meta-llama/Llama-3.3-70B-Instruct", "attention_type": "GQA", **model},
                    "mla": {"id": "deepseek-chat", "attention_type": "MLA"},
                },
            }
        )
    )
    return path


# ---------------------------------------------------------------------------- config and flags


def test_metrics_url_in_json_and_toml(tmp_path: Path) -> None:
    config = load_config(_json(tmp_path, metrics_url="http://10.0.0.5:8001/metrics"))
    assert [m.metrics_url for m in config.models] == ["http://10.0.0.5:8001/metrics", None]
    toml = tmp_path / "c.toml"
    toml.write_text(
        '[provider]\nbase_url = "https://gw.example/api"\n'
        '[models.a]\nid = "x"\nattention = "MLA"\nmetrics_url = "http://sglang:30000/metrics"\n'
    )
    assert load_config(toml).models[0].metrics_url == "http://sglang:30000/metrics"


@pytest.mark.parametrize("bad", ["sglang:30000/metrics", "ftp://h/metrics", "http:///metrics", ""])
def test_bad_metrics_url_is_one_line(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UsageError) as err:
        load_config(_json(tmp_path, metrics_url=bad))
    assert "metrics_url" in str(err.value) and "\n" not in str(err.value)


def test_flags_validate_and_reach_locust_by_env() -> None:
    assert server_metrics_mode("OFF") == "off" and server_metrics_mode(None) == "auto"
    with pytest.raises(UsageError, match="auto or off"):
        server_metrics_mode("sometimes")
    assert server_metrics_interval("0.5") == 0.5 and server_metrics_interval("2s") == 2.0
    for bad in ("0", "-1", "soon"):
        with pytest.raises(UsageError):
            server_metrics_interval(bad)
    assert OPTION["server-metrics"].env == "ATTNLOAD_SERVER_METRICS"
    assert OPTION["server-metrics-interval"].locust_flag == "--attnload-server-metrics-interval"


def test_scrape_targets_default_url_override_and_names(tmp_path: Path) -> None:
    config = load_config(_json(tmp_path, metrics_url="http://10.0.0.5:8001/metrics"))
    facts = {"deepseek-chat": {"preset": "deepseek-v3"}}
    gqa, mla = scrape_targets(config, lambda model_id: facts.get(model_id))
    assert gqa.url == "http://10.0.0.5:8001/metrics"
    assert gqa.names == {"meta-llama/Llama-3.3-70B-Instruct", "Llama-3.3-70B-Instruct"}
    assert mla.url == "http://10.0.0.5:8000/metrics"  # the root of the base URL's port, not /api/metrics
    assert mla.names == {"deepseek-chat", "deepseek-v3"}  # the simulator serves the alias as its preset


# ---------------------------------------------------------------------------- ServerView


def test_server_view_splits_stages_at_the_boundaries(tmp_path: Path) -> None:
    bodies = [(DATA / n).read_text() for n in ("vllm_v1_t0.prom", "vllm_v1_t1.prom", "vllm_restart_before.prom")]
    served: list[str] = []

    def fetch(url: str) -> str:
        served.append(url)
        return bodies[min(len(served) - 1, len(bodies) - 1)]

    config = load_config(_json(tmp_path))
    view = ServerView(scrape_targets(config)[:1], interval_s=3600, fetch=fetch)
    view.start()
    view.poller.poll_once()  # type: ignore[union-attr]  # the baseline (the greenlet has not run yet)
    view.stage_ended(0)
    view.stage_ended(1)
    view.stop()
    out = view.results()
    first, second = out.stages["gqa"][0], out.stages["gqa"][1]
    assert first is not None and second is not None
    assert (first.preemptions, first.generation_tokens) == (5, 40000)  # t0 -> t1
    assert (second.preemptions, second.generation_tokens) == (11, 60000)  # t1 -> before restart
    assert out.totals["gqa"] is not None and out.totals["gqa"].generation_tokens == 100000
    assert view.poller is None  # stopped: a later results() reads what was kept


# ---------------------------------------------------------------------------- agreement check


def _server(tokens: float | None, ttft_p50: float | None, waiting: float = 0.0) -> ServerSummary:
    return ServerSummary(
        source="vllm",
        samples=10,
        kv_cache_usage=GaugeSummary(mean=0.5, max=0.9),
        requests_running=GaugeSummary(mean=4, max=8),
        requests_waiting=GaugeSummary(mean=waiting, max=waiting),
        preemptions=0,
        generation_tokens=tokens,
        ttft_p50_s=ttft_p50,
    )


def test_agreeing_views_are_not_flagged() -> None:
    s = stage(0, 8, 0.200, 0.01, 100.0)  # 100 ok requests, 12,800 tokens, TTFT p50 200 ms
    assert token_allowance(s) == pytest.approx(0.05 * 12800 + 10 + 8 * 128)
    assert gap_reasons(s, _server(12800 + 1000, 0.180)) == []  # boundary spill: within the allowance
    flagged = with_server(s, _server(12800, 0.190))
    assert SERVER_GAP_FLAG not in flagged.flags and flagged.server is not None


def test_token_and_ttft_gaps_are_flagged_with_reasons() -> None:
    s = stage(0, 8, 0.400, 0.01, 100.0)
    out = with_server(s, _server(40000, 0.100))  # someone else's traffic; a gateway adds 300 ms
    assert out.flags == [SERVER_GAP_FLAG]
    assert "40000 tokens" in out.server_gap_reasons[0] and "12800" in out.server_gap_reasons[0]
    assert "half the client's" in out.server_gap_reasons[1]
    assert gap_reasons(stage(0, 8, 0.030, 0.01, 100.0), _server(None, 0.010)) == []  # 20 ms apart: no gap
    assert "twice" in gap_reasons(s, _server(None, 1.0))[0]


def test_results_carry_server_and_null_where_unread() -> None:
    gqa = gqa_model()
    stages = [
        with_server(s, _server(s.completion_tokens, s.ttft_s.p50, waiting=12.0 if s.index == 3 else 0.2))
        for s in gqa.stages
    ]
    mla = mla_model()
    mla = mla.model_copy(
        update={"stages": [with_server(s, _server(s.completion_tokens, s.ttft_s.p50, 0.1)) for s in mla.stages]}
    )
    run = results(gqa.model_copy(update={"stages": stages}), mla)
    data = json.loads(run.to_json())
    assert data["models"][0]["stages"][3]["server"]["requests_waiting"]["mean"] == 12.0
    assert data["models"][0]["server"] is None  # no whole-run view given: null, not absent
    assert Results.model_validate(data) == run
    unread = json.loads(results().to_json())
    assert all(s["server"] is None for m in unread["models"] for s in m["stages"])


def test_server_results_missing_stage_is_null() -> None:
    empty = ServerResults(stages={"m": {0: None}}, totals={"m": None})
    assert empty.stage("m", 0) is None and empty.stage("m", 5) is None and empty.total("other") is None
    s: StageSummary = stage(0, 1, 0.1, 0.01, 10.0)
    assert with_server(s, None) is s


# ---------------------------------------------------------------------------- renderings


def _with_server_run() -> Results:
    gqa, mla = gqa_model(), mla_model()

    def server(s: StageSummary, kv: float, waiting: float, preempt: int) -> StageSummary:
        summary = _server(s.completion_tokens, s.ttft_s.p50, waiting).model_copy(
            update={"kv_cache_usage": GaugeSummary(mean=kv, max=min(kv + 0.05, 1.0)), "preemptions": preempt}
        )
        return with_server(s, summary)

    gqa = gqa.model_copy(
        update={
            "stages": [
                server(s, 0.2 + 0.26 * s.index, 12.0 if s.index == 3 else 0.1, 7 if s.index == 3 else 0)
                for s in gqa.stages
            ]
        }
    )
    mla = mla.model_copy(update={"stages": [server(s, 0.1 * (s.index + 1), 0.0, 0) for s in mla.stages]})
    return results(gqa, mla)


def test_console_html_tab_and_explanation_show_the_server_view() -> None:
    run = _with_server_run()
    console = Console(width=200, record=True, color_system=None)
    print_summary(run, console)
    text = console.export_text()
    assert "server view" in text and "98.0 % / 100.0 %" in text and "12 / 12" in text
    html = render_html(run)
    assert 'id="server-table"' in html and 'data-field="server.requests_waiting.mean" data-value="12.0"' in html
    paragraphs = " ".join(explain(run))
    assert "KV cache was 100.0 % full" in paragraphs and "12 requests waiting" in paragraphs
    assert "7 preemptions" in paragraphs and "queued for KV space on llama-3-70b" in paragraphs
    rows = llm_rows(run)
    assert rows[0]["kv_used_pct"] == "98.0 %" and rows[0]["waiting_mean"] == "12"
    assert rows[1]["preemptions"] == "0"
    plain = llm_rows(results())
    assert plain[0]["kv_used_pct"] == ""  # no server metrics: a blank cell, not 0
