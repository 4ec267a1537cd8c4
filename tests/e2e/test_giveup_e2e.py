"""A server that answers every request with 404 (model not found) is not hammered, and a run against it ends.

Before this, one closed-loop user sent ~375 such requests a second, the rate at which a real gateway
rate-limits or bans the key. Now they back off like connection failures (client/backoff.py), and
after 20 in a row with no success the console says so once with the fix and the model's users stop
(runner/sender/giveup.py): the run exits 1. ``--keep-going`` sends on, still backed off.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from helpers import FAKES, Processes, attnload, free_port, http_json, latest_results, wait_http, write_config

NOT_FOUND = {
    "error": {"message": "The model `gpt-9` does not exist", "type": "invalid_request_error", "code": "model_not_found"}
}


def _server(processes: Processes, tmp_path: Path) -> str:
    body = tmp_path / "not_found.json"
    body.write_text(json.dumps(NOT_FOUND))
    port = free_port()
    server = processes.start(
        [sys.executable, str(FAKES / "gateway_error_server.py"), "--port", str(port), "--status", "404"]
        + ["--body-file", str(body)],
        name="gateway",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", server)
    return url


def _run(processes: Processes, tmp_path: Path, url: str, name: str, *extra: str, **config: Any) -> tuple[int, str]:
    path = write_config(tmp_path, url, {"typo_model": ("gpt-9", "GQA")}, **config)
    run = processes.start(
        attnload("run", "-c", str(path), "--users", "2", "--duration", "10s", "--results", str(tmp_path / name))
        + ["--metrics-port", str(free_port()), *extra],
        name=name,
    )
    code = run.wait(timeout=120)
    return code, processes.log_of(run)


def test_a_model_that_is_not_found_is_backed_off_and_named(processes: Processes, tmp_path: Path) -> None:
    url = _server(processes, tmp_path)
    code, output = _run(processes, tmp_path, url, "default")
    sent = http_json(url + "/counts")["chat"]
    assert code == 1, output
    assert 0 < sent <= 100, sent  # without the backoff: ~7,500 from 2 users in 10 s
    summary = latest_results(tmp_path / "default")["models"][0]
    assert set(summary["errors"]) - {"cancelled"} == {"not_found"}
    assert re.search(r"typo_model (\d+)/\1 all not_found: check the model id", output), output


def test_twenty_in_a_row_stop_the_models_users_unless_told_to_keep_going(processes: Processes, tmp_path: Path) -> None:
    """A short backoff reaches the limit in about a second: said once, the users stop and the run ends early."""
    url = _server(processes, tmp_path)
    quick = {"request": {"connect_backoff_s": 0.01, "connect_backoff_max_s": 0.05}}
    code, output = _run(processes, tmp_path, url, "stops", **quick)
    stopped_at = http_json(url + "/counts")["chat"]
    assert code == 1, output
    assert output.count("requests in a row failed not_found, none succeeded") == 1, output
    assert "its users stop (--keep-going sends on)" in output and "check the model id" in output
    assert 20 <= stopped_at <= 30, stopped_at  # the 20, plus what the other user had in flight
    assert latest_results(tmp_path / "stops")["duration_s"] < 5  # every model stopped: the test ended early

    code, output = _run(processes, tmp_path, url, "keeps", "--keep-going", **quick)
    kept = http_json(url + "/counts")["chat"] - stopped_at
    assert code == 1 and "(--keep-going: sending on)" in output, output
    duration_s = latest_results(tmp_path / "keeps")["duration_s"]
    assert kept > 60 and duration_s >= 9.5, (kept, duration_s)  # sending on for the whole 10 s, backed off
