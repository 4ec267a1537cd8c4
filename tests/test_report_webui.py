"""The Locust web UI extension: LLM tab declared, rows added to /stats/requests, /attnload/stats served.

In-process: a Locust Environment with a LocalRunner and its web UI (not started), driven
through Flask's test client with a fake snapshot.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

locust = pytest.importorskip("locust")

from locust import User, constant, task  # noqa: E402
from locust.env import Environment  # noqa: E402

from attnload.report.fmt import ms_bare, rate  # noqa: E402
from attnload.report.live import webui  # noqa: E402
from attnload.results.model import GaugeSummary, Results, ServerSummary  # noqa: E402
from helpers.results import envelope, gqa_model, mla_model, results  # noqa: E402


class _Idle(User):
    wait_time = constant(1)

    @task
    def nothing(self) -> None:
        """Never run: the tests only read the web UI."""


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Environment]:
    monkeypatch.setattr(sys, "argv", ["locust"])  # the web UI re-parses argv for its extra options
    environment = Environment(user_classes=[_Idle], events=locust.events)
    environment.create_local_runner()
    environment.create_web_ui("127.0.0.1", 0, delayed_start=True)
    yield environment
    assert environment.runner is not None
    environment.runner.quit()


def _client(environment: Environment) -> Any:
    assert environment.web_ui is not None
    return environment.web_ui.app.test_client()


def test_install_adds_tab_table_and_rows(env: Environment) -> None:
    snap = results(gqa_model(), mla_model())
    webui.install(env, lambda: snap)
    client = _client(env)

    page = client.get("/").get_data(as_text=True)
    assert '"extended_tabs": [{"key": "llm", "title": "LLM"}]' in page or '"title": "LLM"' in page

    body = client.get("/stats/requests").get_json()
    assert "stats" in body and body["stats"], "Locust's own statistics must still be there"
    (extended,) = body["extended_stats"]
    assert extended["key"] == "llm"
    rows = {r["safe_name"]: r for r in extended["data"]}
    gqa = snap.model("llama-3-70b").stages[-1]
    assert rows["llama-3-70b"]["ttft_p50_ms"] == ms_bare(gqa.ttft_s.p50)
    assert float(rows["llama-3-70b"]["ttft_p50_ms"].replace(",", "")) == pytest.approx(gqa.ttft_s.p50 * 1000, abs=0.5)
    assert rows["llama-3-70b"]["output_tok_s"] == rate(gqa.output_tokens_per_s)
    assert rows["llama-3-70b"]["errors"] == sum(gqa.errors.values())
    assert rows["deepseek-v3"]["stage"].startswith("4: 256 users")


def test_stats_route_serves_the_snapshot_json(env: Environment) -> None:
    snap = results(mla_model())
    webui.install(env, lambda: snap)
    response = _client(env).get(webui.STATS_ROUTE)
    assert response.status_code == 200
    assert Results.model_validate(json.loads(response.get_data())) == snap


def test_broken_snapshot_keeps_locust_stats_working(env: Environment) -> None:
    def broken() -> Results:
        raise RuntimeError("boom")

    webui.install(env, broken)
    body = _client(env).get("/stats/requests").get_json()
    assert body["stats"] and body["extended_stats"] == [{"key": "llm", "data": []}]


def test_rows_before_any_request_show_blanks() -> None:
    empty = envelope(gqa_model().model_copy(update={"stages": [], "ttft_s": gqa_model().ttft_s.__class__()}))
    (row,) = webui.llm_rows(empty)
    assert row["ttft_p50_ms"] == "" and row["stage"] == "run"


def test_cells_read_like_the_console_never_raw_fractions() -> None:
    """KV used as "2.3 %" (one decimal), ms and tok/s rounded as the console tables round them."""
    server = ServerSummary(
        source="vllm",
        samples=10,
        kv_cache_usage=GaugeSummary(mean=0.02309707431366254, max=0.05),
        requests_running=GaugeSummary(mean=4, max=8),
        requests_waiting=GaugeSummary(mean=1.2345, max=3),
        preemptions=12,
    )
    model = gqa_model()
    last = model.stages[-1].model_copy(update={"server": server, "output_tokens_per_s": 1234.5678})
    last = last.model_copy(update={"ttft_s": last.ttft_s.model_copy(update={"p50": 0.0501234})})
    snap = results(model.model_copy(update={"stages": [*model.stages[:-1], last]}))
    (row,) = [r for r in webui.llm_rows(snap) if r["safe_name"] == "llama-3-70b"]
    assert row["kv_used_pct"] == "2.3 %"
    assert (row["ttft_p50_ms"], row["output_tok_s"]) == ("50.1", "1,235")
    assert (row["waiting_mean"], row["preemptions"]) == ("1.2", "12")
    for key, value in row.items():
        assert isinstance(value, str | int), (key, value)  # a float would reach the page unrounded
    assert all("round" not in column for column in webui._table_structure())


def test_install_without_web_ui_is_a_no_op() -> None:
    class Headless:
        web_ui = None

    webui.install(Headless(), lambda: results())


def test_live_charts_script_injected_and_served_same_origin(env: Environment) -> None:
    snap = results(gqa_model(), mla_model())
    webui.install(env, lambda: snap)
    client = _client(env)
    page = client.get("/").get_data(as_text=True)
    assert page.count(webui.LIVE_TAG) == 1 and page.index(webui.LIVE_TAG) < page.index("</body>")
    assert "http" not in webui.LIVE_TAG  # relative: same origin as Locust's page, no CDN
    script = client.get(webui.LIVE_SCRIPT_ROUTE)
    assert script.status_code == 200 and script.mimetype == "text/javascript"
    assert "attnload-live-chart" in script.get_data(as_text=True)
    body = client.get(webui.LIVE_ROUTE).get_json()
    assert body["running"] is False  # not started: the page adds no points
    points = {p["key"]: p for p in body["models"]}
    gqa = snap.model("llama-3-70b").stages[-1]
    assert points["llama-3-70b"]["attention"] == "gqa" and points["deepseek-v3"]["attention"] == "mla"
    assert points["llama-3-70b"]["ttft_p99_ms"] == pytest.approx(gqa.ttft_s.p99 * 1000)
    assert points["llama-3-70b"]["itl_p50_ms"] == pytest.approx(gqa.itl_s.p50 * 1000)
    assert points["llama-3-70b"]["output_tok_s"] == gqa.output_tokens_per_s
    assert points["deepseek-v3"]["stage"].startswith("4: 256 users")


def test_inject_is_idempotent_and_leaves_other_bodies_alone() -> None:
    once = webui.inject_live_script("<html><body>x</body></html>")
    assert webui.inject_live_script(once) == once
    assert webui.inject_live_script('{"json": true}') == '{"json": true}'
