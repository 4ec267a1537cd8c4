"""``--requests-out`` pieces: the record, the bounded worker buffer, the master's file, the
report's reading of it, and the flags (the end-to-end checks are tests/e2e/test_requests_out_e2e.py)."""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from attnload.config.load import load_config
from attnload.errors import UsageError
from attnload.measure.recorder import RequestRecord
from attnload.measure.requestlog import (
    SCHEMA,
    LineBuffer,
    TargetFacts,
    Who,
    encode,
    itl_p50_max,
    request_line,
    status_of,
)
from attnload.plan.options import RunOptions, requests_out_option
from attnload.report.html import render_html
from attnload.report.requests import MAX_POINTS, find_requests_file, read_lines, sample_points
from attnload.results.model import RequestsOut, Results
from attnload.results.requests_file import RequestsFile, requests_out_path
from attnload.runner.collector.requestsfile import RequestsWriter
from attnload.runner.runtime import Runtime
from attnload.runner.sender.requestlines import RequestLines
from helpers import attnload, write_config
from test_cluster import fake  # noqa: F401 - the fake Kubernetes API fixture

FACTS = TargetFacts("mla_model", "deepseek-chat", "MLA")


def _record(**changes: object) -> RequestRecord:
    base = RequestRecord(
        model_key="mla_model",
        profile="chat",
        stage=2,
        outcome="ok",
        error=None,
        ttft_s=0.25,
        itl_samples=((0.01, 1), (0.03, 1), (0.02, 2)),
        e2e_s=0.31,
        prompt_tokens=900,
        completion_tokens=5,
        cached_prompt_tokens=None,
        tokens_estimated=False,
        started_perf=100.0,
        http_status=200,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_status_is_the_runner_outcome_abandoned_included() -> None:
    for outcome in ("ok", "failed", "cancelled", "abandoned"):
        assert status_of(_record(outcome=outcome)) == outcome
    assert status_of(_record(outcome="something-new")) == "failed"  # never hidden


def test_itl_median_and_max_are_token_weighted() -> None:
    assert itl_p50_max(()) == (None, None)
    assert itl_p50_max(((0.01, 1), (0.03, 1), (0.02, 2))) == (0.02, 0.03)
    assert itl_p50_max(((0.05, 1), (0.01, 9))) == (0.01, 0.05)


def test_a_closed_loop_line_maps_perf_times_to_epoch() -> None:
    line = request_line(_record(), FACTS, worker=3, who=Who(user=7), now_perf=1000.0, now_epoch=1_700_000_900.0)
    assert line["v"] == SCHEMA
    assert (line["target"], line["model"], line["attention"], line["stage"], line["worker"], line["user"]) == (
        "mla_model",
        "deepseek-chat",
        "MLA",
        2,
        3,
        7,
    )
    assert line["start_s"] == 1_700_000_000.0 and line["intended_s"] is None
    assert line["first_token_s"] == 1_700_000_000.25 and line["end_s"] == 1_700_000_000.31
    assert (line["ttft_s"], line["e2e_s"], line["tpot_s"]) == (0.25, 0.31, 0.015)
    assert (line["itl_p50_s"], line["itl_max_s"], line["chunks"]) == (0.02, 0.03, 4)
    assert (line["cached_tokens"], line["http_status"], line["status"], line["error_class"]) == (None, 200, "ok", None)
    assert line["conversation"] is None and line["turn"] is None  # a single-turn request has none
    assert json.loads(encode(line)) == line


def test_an_open_loop_line_counts_from_the_intended_start() -> None:
    record = _record(
        dispatch_lag_s=0.5,
        stage=-1,
        turn=2,
        outcome="failed",
        error="rate_limited",
        ttft_s=None,
        itl_samples=(),
        http_status=429,
        cached_prompt_tokens=128,
    )
    line = request_line(
        record, FACTS, worker=0, who=Who(conversation="w0o5"), now_perf=1000.0, now_epoch=1_700_000_900.0
    )
    assert line["intended_s"] == 1_699_999_999.5 and line["start_s"] == 1_700_000_000.0
    assert line["end_s"] == pytest.approx(1_699_999_999.5 + 0.31)
    assert line["stage"] is None  # a warm-up request: in no stage
    assert (line["conversation"], line["turn"], line["user"]) == ("w0o5", 2, None)
    assert (line["first_token_s"], line["itl_p50_s"], line["chunks"]) == (None, None, 0)
    assert (line["status"], line["error_class"], line["http_status"], line["cached_tokens"]) == (
        "failed",
        "rate_limited",
        429,
        128,
    )


def test_the_buffer_is_bounded_and_counts_what_it_drops() -> None:
    buffer = LineBuffer(capacity=5, per_report=2)
    for i in range(8):
        buffer.add(str(i))
    assert buffer.take() == {"lines": ["0", "1"], "dropped": 3}
    assert buffer.take_all() == {"lines": ["2", "3", "4"], "dropped": 0}
    assert buffer.take() is None


def test_gzip_batches_read_to_eof_without_a_close(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each batch is a whole gzip member: a master killed after any batch leaves a file gzip reads to EOF."""
    path = tmp_path / "sub" / "r.jsonl.gz"
    out = RequestsFile(path)
    out.write({"lines": ['{"a":1}', '{"a":2}'], "dropped": 0})
    with gzip.open(path, "rt") as handle:
        assert handle.read() == '{"a":1}\n{"a":2}\n'
    out.write({"lines": ['{"a":3}'], "dropped": 4})
    out.write({"lines": [], "dropped": 1})
    with gzip.open(path, "rt") as handle:  # no close() yet: still whole
        assert [json.loads(t)["a"] for t in handle.read().splitlines()] == [1, 2, 3]
    assert out.summary() == RequestsOut(path=str(path), records=3, dropped=5)
    assert capsys.readouterr().err.count("request records dropped") == 1  # said once
    out.close()


def test_a_plain_file_gets_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    out = RequestsFile(path)
    out.write({"lines": ["{}", "{}"], "dropped": 0})
    assert path.read_text() == "{}\n{}\n"
    out.close()


def test_worker_lines_reach_the_master_file(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, "http://127.0.0.1:9"))
    options = RunOptions(config.source, requests_out=str(tmp_path / "unused.jsonl"))
    sender = Runtime.worker(config, options).sender
    assert sender is not None and sender.lines is not None
    assert not (tmp_path / "unused.jsonl").exists()  # a worker holds lines, never a file
    worker = RequestLines(config)
    master = RequestsWriter(str(tmp_path / "r.jsonl.gz"))
    for i in range(25_000):
        worker.observe(_record(model_key="gqa_model", prompt_tokens=i), worker=1)
    first = worker.take()
    assert first is not None and len(first["lines"]) == 20_000  # one report's share
    master.write(first)
    master.write(worker.take(final=True))  # the final report takes the rest
    lines = list(read_lines(tmp_path / "r.jsonl.gz"))
    assert [line["prompt_tokens"] for line in lines] == list(range(25_000))
    assert {(line["model"], line["attention"], line["worker"]) for line in lines} == {("llama-3-70b", "GQA", 1)}
    assert master.summary(final=True) == RequestsOut(path=str(tmp_path / "r.jsonl.gz"), records=25_000)


def test_the_path_is_checked_and_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert requests_out_path(None) is None and requests_out_path(" ") is None
    assert requests_out_path("out/r.jsonl.gz") == str(tmp_path / "out" / "r.jsonl.gz")
    with pytest.raises(UsageError, match="is a directory"):
        requests_out_path(str(tmp_path))
    parsed = argparse.Namespace(attnload_requests_out="r.jsonl", attnload_results="/results")
    assert requests_out_option(parsed) == "/results/r.jsonl"  # a container's relative name: its results volume
    assert requests_out_option(argparse.Namespace(attnload_requests_out="", attnload_results="x")) is None


def test_run_refuses_a_directory_in_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path, "http://127.0.0.1:9")
    done = subprocess.run(
        attnload("run", "-c", str(config), "--requests-out", str(tmp_path)), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--requests-out" in done.stderr and "Traceback" not in done.stderr


def _results(path: str | None) -> Results:
    data = {
        "schema": "attnload.results/v1",
        "started_at": "x",
        "ended_at": "y",
        "duration_s": 1.0,
        "config_sha256": "0" * 64,
        "models": [],
    }
    if path is not None:
        data["requests_out"] = {"path": path, "schema": SCHEMA, "records": 1, "dropped": 0}
    return Results.model_validate(data)


def _write_lines(path: Path, n: int) -> None:
    with gzip.open(path, "wt") as handle:
        for i in range(n):
            key, attention = ("mla_model", "MLA") if i % 2 else ("gqa_model", "GQA")
            handle.write(
                encode(
                    {
                        "v": SCHEMA,
                        "target": key,
                        "attention": attention,
                        "status": "ok",
                        "prompt_tokens": 64 + i % 4000,
                        "ttft_s": 0.01 + (i % 4000) * 1e-5,
                    }
                )
                + "\n"
            )
        handle.write('{"status": "failed", "ttft_s": null, "prompt_tokens": 5}\n{"torn')


def test_the_sample_is_bounded_and_deterministic(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl.gz"
    _write_lines(path, 12_000)
    first, again = sample_points(path), sample_points(path)
    assert len(first) == MAX_POINTS and first == again
    assert {p.target for p in first} == {"gqa_model", "mla_model"}
    assert len(sample_points(path, limit=100_000)) == 12_000  # failures and the torn line left out
    assert len(sample_points(path, limit=100_000, max_lines=1_000)) == 1_000


def test_the_report_finds_the_file_and_draws_the_scatter(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl.gz"
    _write_lines(path, 300)
    assert find_requests_file(_results(None)) is None
    assert find_requests_file(_results(str(path))) == path
    fetched = _results("/results/r.jsonl.gz")  # fetched from a cluster: found beside the results
    assert find_requests_file(fetched, tmp_path / "run.json") == path
    with pytest.raises(UsageError, match="--requests"):
        find_requests_file(fetched, explicit=tmp_path / "missing.jsonl")
    html = render_html(_results(str(path)), requests=path)
    scatter = html[html.index('id="plot-ttft-scatter"') :]
    scatter = scatter[: scatter.index("</svg>")]
    assert scatter.count('class="datum" data-series="gqa_model (GQA)"') == 150
    assert scatter.count('class="datum" data-series="mla_model (MLA)"') == 150
    assert "plot-ttft-scatter" not in render_html(_results(None))


def test_report_command_takes_requests(tmp_path: Path) -> None:
    lines = tmp_path / "lines.jsonl.gz"
    _write_lines(lines, 50)
    results = tmp_path / "run.json"
    results.write_text(_results(None).to_json())
    done = subprocess.run(
        attnload("report", str(results), "--requests", str(lines)), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "plot-ttft-scatter" in (tmp_path / "run.html").read_text()
    done = subprocess.run(
        attnload("report", str(results), "--requests", str(tmp_path / "no.jsonl")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--requests" in done.stderr and "Traceback" not in done.stderr


class _Raw(str):
    """A body the fake API server sends as these exact bytes (its handler calls ``.encode()``)."""

    raw = b""

    def encode(self, *args: object, **kwargs: object) -> bytes:  # type: ignore[override]
        return self.raw


def test_cluster_run_asks_for_the_file_and_results_fetches_it(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from urllib.parse import parse_qsl

    from attnload.commands.cli import main
    from test_cluster import PROXY

    api = request.getfixturevalue("fake")
    assert main(["cluster", "run", "--users", "8", "--requests-out", "requests.jsonl.gz"]) == 0
    swarm = [body for _method, target, _ctype, body in api.bodies if target.endswith(f"{PROXY}/swarm")]
    assert dict(parse_qsl(swarm[-1].decode()))["attnload_requests_out"] == "requests.jsonl.gz"
    assert main(["cluster", "run", "--requests-out", "../etc/x.jsonl"]) == 2
    assert "plain file name" in capsys.readouterr().err
    data = gzip.compress(b'{"v":"attnload.requests/v1"}\n')
    body = _Raw("gz")
    body.raw = data
    api.results["requests.jsonl.gz"] = body
    api.results["more.jsonl"] = '{"v":"attnload.requests/v1"}\n'
    assert main(["cluster", "results", "--out", str(tmp_path / "res")]) == 0
    assert (tmp_path / "res" / "requests.jsonl.gz").read_bytes() == data
    assert (tmp_path / "res" / "more.jsonl").read_text() == '{"v":"attnload.requests/v1"}\n'


def test_a_new_test_starts_a_fresh_file(tmp_path: Path) -> None:
    master = RequestsWriter(str(tmp_path / "r.jsonl"))
    master.write({"lines": ["{}", "{}"], "dropped": 1})
    master.restart()  # the counts of the results restart with the test: so do the file's
    master.write({"lines": ["{}"], "dropped": 0})
    assert (tmp_path / "r.jsonl").read_text() == "{}\n"
    assert master.summary() == RequestsOut(path=str(tmp_path / "r.jsonl"), records=1)
