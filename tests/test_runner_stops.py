"""Atomic results files, snapshots, the run's exit status and its crash counts (unit level)."""

from __future__ import annotations

import json
import os
import signal
import stat
from argparse import Namespace
from pathlib import Path

import pytest

from attnload.results.model import ClientInfo, ModelSummary, Requests, Results, load_results
from attnload.results.outcome import exit_status
from attnload.results.write import atomic_write_text, write_results, write_snapshot
from attnload.runner.collector.health import FleetHealth
from attnload.runner.sender.health import RunHealth
from attnload.runner.stops import DEFAULT_SNAPSHOT_INTERVAL_S, signal_exit_code, snapshot_interval
from helpers.results import envelope


def results(ok: int = 3, failed: int = 0, **client: object) -> Results:
    model = ModelSummary(key="m", model="llama-3-70b", attention="GQA", requests=Requests(ok=ok, failed=failed))
    return envelope(model, client=ClientInfo(**client))  # type: ignore[arg-type]


def test_atomic_write_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")
    atomic_write_text(path, "new content")
    assert path.read_text() == "new content"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    assert stat.S_IMODE(path.stat().st_mode) & 0o044 == 0o044  # readable beside the run, like write_text


def test_a_snapshot_is_marked_interrupted_until_the_final_write_replaces_it(tmp_path: Path) -> None:
    started = 1_767_225_600.0
    snapshot = write_snapshot(results(ok=2), tmp_path, started)
    assert load_results(snapshot).interrupted is True and load_results(snapshot).snapshot is True
    assert not (tmp_path / "latest.txt").exists()  # the marker means "a run ended"
    final = write_results(results(ok=5), tmp_path, started, render_html=lambda r, p: Path(p).write_text("<html>"))
    assert final == snapshot
    data = json.loads(final.read_text())
    assert data["interrupted"] is False and data["snapshot"] is False and data["models"][0]["requests"]["ok"] == 5
    assert final.with_suffix(".html").read_text() == "<html>"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [final.name, final.with_suffix(".html").name, "latest.txt"]
    )


def test_old_results_without_the_field_read_as_not_interrupted(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    data = json.loads(results().to_json())
    del data["interrupted"]
    path.write_text(json.dumps(data))
    assert load_results(path).interrupted is False


@pytest.mark.parametrize(
    ("given", "code", "says"),
    [
        ((results(), None), 0, None),
        ((results(ok=0, failed=4), None), 0, None),  # failed requests are the --fail-on policy's business
        ((results().model_copy(update={"interrupted": True}), signal.SIGTERM), 143, "SIGTERM: results so far written"),
        ((results(), signal.SIGTERM, "Locust worker 1"), 143, "SIGTERM of Locust worker 1: the run went on to its end"),
        ((None, signal.SIGINT), 130, "interrupted by SIGINT: no results were written"),
        ((None, None), 1, "without writing results"),
        ((results().model_copy(update={"interrupted": True, "snapshot": True}), None), 1, "last snapshot"),
        ((results().model_copy(update={"interrupted": True}), None), 1, "complete up to the stop"),
        ((results().model_copy(update={"interrupted": True}), signal.SIGTERM, "the Locust master"), 143, "complete"),
        ((results().model_copy(update={"snapshot": True}), signal.SIGTERM), 143, "only its last snapshot"),
        ((results(ok=0, scheduler_error="OverflowError: x"), None), 1, "scheduler died (OverflowError: x)"),
        ((results(ok=0, users_started=4, users_crashed=4), None), 1, "every user crashed (4 of 4)"),
        ((results(ok=0), None), 1, "nothing was sent"),
    ],
)
def test_exit_status(given: tuple[Results | None, int | None, str], code: int, says: str | None) -> None:
    got_code, message = exit_status(*given)
    assert got_code == code
    assert (message is None) if says is None else (says in (message or ""))


def test_some_users_crashing_is_not_every_user() -> None:
    assert exit_status(results(users_started=4, users_crashed=3)) == (0, None)


def test_health_sums_workers_and_keeps_the_first_scheduler_error() -> None:
    master = FleetHealth()
    one, two = RunHealth(), RunHealth()
    one.user_error(object_a := object())
    one.user_error(object_a)  # the same user twice is one crashed user
    two.scheduler_died(OverflowError("cannot convert float infinity to integer"))
    two.scheduler_died(ValueError("later"))
    master.merge("w1", one.payload(started=2))
    master.merge("w2", two.payload(started=3))
    master.merge("w2", two.payload(started=3))  # reports are cumulative: the latest replaces
    assert master.client_fields() == {
        "users_started": 5,
        "users_crashed": 1,
        "scheduler_error": "OverflowError: cannot convert float infinity to integer",
    }


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", DEFAULT_SNAPSHOT_INTERVAL_S),
        ("5", 5.0),
        ("0", 0.0),
        ("nan", DEFAULT_SNAPSHOT_INTERVAL_S),
        ("-1", DEFAULT_SNAPSHOT_INTERVAL_S),
        ("inf", DEFAULT_SNAPSHOT_INTERVAL_S),
        (None, DEFAULT_SNAPSHOT_INTERVAL_S),
    ],
)
def test_snapshot_interval_from_locust_options(raw: str | None, expected: float) -> None:
    assert snapshot_interval(Namespace(attnload_snapshot_interval=raw)) == expected


def test_signal_exit_codes_follow_the_shell() -> None:
    assert (signal_exit_code(signal.SIGINT), signal_exit_code(signal.SIGTERM)) == (130, 143)


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "0.5"])
def test_a_bad_snapshot_interval_is_one_line_and_exit_2(tmp_path: Path, value: str) -> None:
    import subprocess
    import sys

    config = tmp_path / "c.json"
    config.write_text(
        json.dumps({"base_url": "http://127.0.0.1:9/v1", "models": {"m": {"id": "x", "attention_type": "GQA"}}})
    )
    done = subprocess.run(
        [sys.executable, "-m", "attnload", "run", "-c", str(config), "--snapshot-interval", value],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "--snapshot-interval" in done.stderr
