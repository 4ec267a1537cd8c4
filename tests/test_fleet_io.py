"""Backoff on connection errors, open-loop drops, the console's "unreachable", results that cannot be lost
to the disk and the words at the end of a run (unit level; the processes: tests/e2e/test_fleet_io_e2e.py)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import gevent
import pytest

import attnload.client.chat as chat_module
from attnload.client.backoff import Backoff
from attnload.client.chat import ApiClient, chat_body
from attnload.client.transport import Timeouts
from attnload.config.load import load_config
from attnload.measure.recorder import Recorder, RequestRecord
from attnload.runner.collector.reach import Reachability
from attnload.runner.sender.openloop import ClientPool, OpenLoop
from attnload.workload.prompts import PlannedRequest
from helpers import write_config


class RecordedSleep:
    """``gevent`` as the chat client sees it, with ``sleep`` recorded instead of slept: patched in that module
    only, never in gevent itself (every other greenlet of the test process keeps sleeping for real)."""

    def __init__(self, slept: list[float]) -> None:
        self.slept = slept

    def __getattr__(self, name: str) -> object:
        return getattr(gevent, name)

    def sleep(self, seconds: float = 0) -> None:
        self.slept.append(seconds)


def test_backoff_doubles_with_jitter_to_the_cap_and_resets_on_success() -> None:
    low = Backoff(0.1, 5.0, rng=lambda: 0.0)
    high = Backoff(0.1, 5.0, rng=lambda: 1.0)
    lows = [low.failed(now=0.0) for _ in range(9)]
    highs = [high.failed(now=0.0) for _ in range(9)]
    assert highs == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])
    assert lows == pytest.approx([h / 2 for h in highs])  # "equal jitter": half to all of the step
    assert high.wait_s(now=1.0) == pytest.approx(4.0)
    high.succeeded()
    assert (high.failures, high.wait_s(now=0.0)) == (0, 0.0)
    assert high.failed(now=0.0) == pytest.approx(0.1)


def test_backoff_zero_is_off() -> None:
    off = Backoff(0.0, 5.0)
    assert off.failed() == 0.0 and off.wait_s() == 0.0 and not off.enabled


def test_ten_seconds_of_refusals_cost_a_user_few_tries() -> None:
    """The outage arithmetic behind "at most 30 connection failures per user in 10 s": even with the
    shortest jitter every time, a user tries about a dozen times."""
    backoff, now, tries = Backoff(0.1, 5.0, rng=lambda: 0.0), 0.0, 0
    while now < 10.0:
        tries += 1
        now += backoff.failed(now=now)
    assert tries <= 12


def refused_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1/chat/completions"  # nothing listens: connection refused


def send(client: ApiClient) -> RequestRecord:
    body = chat_body("m", [{"role": "user", "content": "hi"}], max_tokens=4, temperature=0.0)
    return client.send(body, model_key="m", profile="p", stage=0)


def test_a_refused_connection_backs_off_the_users_next_try(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(chat_module, "gevent", RecordedSleep(slept))
    backoff = Backoff(0.1, 5.0, rng=lambda: 1.0)
    client = ApiClient(refused_url(), None, Timeouts(connect_s=1, total_s=2), backoff=backoff)
    first = send(client)
    assert (first.outcome, first.error, backoff.failures) == ("failed", "connection", 1)
    assert slept == []
    send(client)
    assert len(slept) == 1 and 0.05 < slept[0] <= 0.1  # the wait is slept before the try, not timed
    assert backoff.failures == 2


def test_an_open_loop_client_never_sleeps_in_the_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(chat_module, "gevent", RecordedSleep(slept))
    backoff = Backoff(0.1, 5.0)
    client = ApiClient(refused_url(), None, Timeouts(connect_s=1, total_s=2), backoff=backoff, waits_backoff=False)
    send(client)
    send(client)
    assert slept == [] and backoff.failures == 2


def test_an_arrival_inside_the_backoff_is_counted_dropped_not_sent(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, "http://127.0.0.1:9"))
    sent: list[str] = []
    dropped: list[tuple[str, str, int]] = []
    pool = ClientPool(list(config.models), lambda t: None, 4)  # type: ignore[arg-type,return-value]
    plan = PlannedRequest(profile="short", messages=[], max_tokens=4)
    loop = OpenLoop(
        list(config.models), pool, lambda stream: plan, lambda c, t, p, s, i: sent.append(t.key), None, "poisson", 0
    )
    loop.backoffs = {m.key: Backoff(0.1, 5.0) for m in config.models}
    loop.on_dropped = lambda key, profile, stage: dropped.append((key, profile, stage))
    loop.backoffs["gqa_model"].failed()
    loop._one("gqa_model", 0.0, 3)
    loop._one("mla_model", 0.0, 3)
    assert dropped == [("gqa_model", "short", 3)] and sent == ["mla_model"]


def test_dropped_counts_reach_the_results_but_not_the_total() -> None:
    from attnload.results.summarize import totals

    recorder = Recorder()
    recorder.count("m", "p", 0, "dropped", 3)
    delta = recorder.take_delta()
    master = Recorder()
    master.merge_delta(json.loads(json.dumps(delta)))  # the worker -> master wire
    requests = totals(master.combined(), 1.0, False)["requests"]
    assert (requests.dropped, requests.total) == (3, 0)


def record(key: str, outcome: str, error: str | None = None) -> RequestRecord:
    return RequestRecord(key, "p", 0, outcome, error, None, (), 0.0, 0, 0, None, True)


def test_unreachable_while_only_connections_fail(caplog: pytest.LogCaptureFixture) -> None:
    recorder, reach = Recorder(), Reachability()
    recorder.add(record("a", "ok"))
    recorder.add(record("b", "ok"))
    reach.tick(recorder, now=0.0)
    recorder.add(record("a", "failed", "connection"))
    recorder.add(record("b", "failed", "timeout"))
    reach.tick(recorder, now=1.0)
    assert reach.unreachable() == ["a"]
    reach.tick(recorder, now=2.0)  # nothing new (workers report every 3 s): still unreachable
    assert reach.unreachable() == ["a"]
    recorder.add(record("a", "ok"))
    reach.tick(recorder, now=5.0)
    assert reach.unreachable() == []
    lines = [r.getMessage() for r in caplog.records]
    assert any("a: unreachable" in line for line in lines) and any(
        "reachable again after 4 s" in line for line in lines
    )


def test_backoff_keys_in_both_config_formats(tmp_path: Path) -> None:
    config = load_config(
        write_config(tmp_path, "http://127.0.0.1:9", request={"connect_backoff_s": 0.5, "connect_backoff_max_s": 2})
    )
    assert (config.request.connect_backoff_s, config.request.connect_backoff_max_s) == (0.5, 2.0)
    toml = tmp_path / "c.toml"
    toml.write_text(
        '[provider]\nbase_url = "http://127.0.0.1:9"\n[models.m]\nid = "x"\nattention = "GQA"\n'
        "[request]\nconnect_backoff_s = 0\n",
        encoding="utf-8",
    )
    assert load_config(toml).request.connect_backoff_s == 0.0
    assert load_config(toml).request.connect_backoff_max_s == 5.0


def test_an_unwritable_output_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    from attnload.errors import UsageError
    from attnload.plan.writable import check_outputs

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError) as error:
        check_outputs(blocker, None, None)
    message = str(error.value)
    assert message.startswith(f"--results {blocker}: not writable (") and message.endswith(
        "; choose a writable directory"
    )
    assert "\n" not in message
    with pytest.raises(UsageError, match="^--requests-out "):
        check_outputs(tmp_path / "ok", str(blocker / "requests.jsonl"), None)
    with pytest.raises(UsageError, match="^--csv "):
        check_outputs(tmp_path / "ok", None, str(blocker / "prefix"))
    check_outputs(tmp_path / "new" / "results", str(tmp_path / "r.jsonl"), str(tmp_path / "csv" / "run"))
    assert (tmp_path / "new" / "results").is_dir() and not list((tmp_path / "new" / "results").iterdir())


def test_final_results_go_to_the_fallback_when_the_directory_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from attnload.plan.launch import _latest_results
    from attnload.results.model import ModelSummary, Requests
    from attnload.results.write import fallback_dir, write_final, write_snapshot
    from helpers.results import envelope

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    results_dir = tmp_path / "results"
    started = 1_767_225_600.0
    import time as clock

    now = clock.time()
    snapshot_of = envelope(ModelSummary(key="m", model="x", attention="GQA", requests=Requests(ok=1)))
    write_snapshot(snapshot_of, results_dir, started)
    final = envelope(ModelSummary(key="m", model="x", attention="GQA", requests=Requests(ok=9)))
    results_dir.rename(tmp_path / "moved")
    results_dir.write_text("a file now")
    path = write_final(final, results_dir, started)
    assert path is not None and path.parent == fallback_dir(results_dir)
    assert str(path.parent).startswith(str(tmp_path / "tmp"))
    found = _latest_results(results_dir, now, snapshots=False)
    assert found is not None and found[1] == path and found[0].models[0].requests.ok == 9


def test_a_stale_snapshot_is_not_the_outcome_of_a_master_that_was_not_killed(tmp_path: Path) -> None:
    import time as clock

    from attnload.plan.launch import _latest_results
    from attnload.results.model import ModelSummary
    from attnload.results.write import write_snapshot
    from helpers.results import envelope

    now = clock.time()
    write_snapshot(envelope(ModelSummary(key="m", model="x", attention="GQA")), tmp_path, now)
    assert _latest_results(tmp_path, now, snapshots=False) is None
    found = _latest_results(tmp_path, now, snapshots=True)
    assert found is not None and found[0].snapshot is True


class Ended:
    def __init__(self, code: int | None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([143, 0], (15, "the Locust master")),
        ([-15, None], (15, "the Locust master")),
        ([0, 0, 130], (2, "Locust worker 2")),
        ([0, -9], None),  # a SIGKILLed worker is lost, not stopped
        ([1], None),
    ],
)
def test_the_signal_that_stopped_one_of_the_runs_processes(codes: list[int | None], expected: object) -> None:
    from attnload.plan.launch import stopped_by_signal

    assert stopped_by_signal([Ended(c) for c in codes]) == expected  # type: ignore[misc]


def test_a_requests_file_the_disk_refuses_counts_lines_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from attnload.results.requests_file import RequestsFile

    file = RequestsFile(tmp_path / "r.jsonl")
    file.write({"lines": ['{"a": 1}']})

    class Full:
        def write(self, data: bytes) -> int:
            raise OSError(28, "No space left on device")

        def close(self) -> None:
            pass

    file._handle = Full()  # type: ignore[assignment]
    file.write({"lines": ['{"a": 2}', '{"a": 3}']})
    file.write({"lines": ['{"a": 4}'], "dropped": 1})
    file.sync()
    summary = file.summary()
    assert (summary.records, summary.dropped) == (1, 4)
    assert "No space left on device" in capsys.readouterr().err


def test_the_progress_line_names_unreachable_models() -> None:
    from attnload.report.live.progress import ProgressState, format_line

    state = ProgressState(elapsed_s=12.0, stage=0, stages=1, total_s=30.0, users=16, unreachable=("gqa_model",))
    assert "UNREACHABLE gqa_model" in format_line(state, {})
    assert "UNREACHABLE" not in format_line(ProgressState(elapsed_s=1.0, stage=0, stages=1, total_s=30.0, users=1), {})
