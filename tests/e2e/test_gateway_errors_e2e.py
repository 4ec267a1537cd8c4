"""A run against a gateway answering LiteLLM's invalid-model body reports ``not_found``.

The body is LiteLLM's own (``ProxyModelNotFoundError`` through its ProxyException handler, see
tests/test_classify_gateways.py); a typo in a model id behind LiteLLM must read as a wrong model
id in the results and in the console's fix line, not as a malformed request.
"""

from __future__ import annotations

import sys
from pathlib import Path

from helpers import FAKES, ROOT, Processes, attnload, free_port, http_json, latest_results, wait_http, write_config


def test_litellm_invalid_model_is_not_found(processes: Processes, tmp_path: Path) -> None:
    body = ROOT / "tests" / "data" / "gateway_errors" / "litellm_invalid_model_str.json"
    port = free_port()
    server = processes.start(
        [
            sys.executable,
            str(FAKES / "gateway_error_server.py"),
            "--port",
            str(port),
            "--status",
            "400",
            "--body-file",
            str(body),
        ],
        name="gateway",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", server)
    config = write_config(tmp_path, url, {"typo_model": ("gpt-9", "GQA")})
    results = tmp_path / "results"
    run = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--users",
            "2",
            "--duration",
            "3s",
            "--workers",
            "1",
            "--results",
            str(results),
            "--metrics-port",
            str(free_port()),
        ),
        name="run",
    )
    run.wait(timeout=90)
    output = processes.log_of(run)
    summary = latest_results(results)["models"][0]
    sent = http_json(url + "/counts")["chat"]
    assert sent > 0 and summary["requests"]["ok"] == 0
    failures = {k: n for k, n in summary["errors"].items() if k != "cancelled"}  # the stop may cancel one in flight
    assert failures == {"not_found": summary["requests"]["failed"]}, (summary["errors"], output)
    assert summary["requests"]["failed"] + summary["requests"]["cancelled"] == sent
    assert (
        "bad_request" not in output
        and "not_found 0" not in output
        and f"not_found {summary['requests']['failed']}" in output
    ), output
    # the one-line fix: `attnload check` names the class and the gateway's model list
    check = processes.start(attnload("check", "-c", str(config)), name="check")
    check.wait(timeout=60)
    lines = processes.log_of(check)
    assert "not_found" in lines and "'gpt-9' is not in the provider's model list (gpt-4o)" in lines, lines
