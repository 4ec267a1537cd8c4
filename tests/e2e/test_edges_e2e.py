"""Real endpoints' addressing against the simulator: Azure OpenAI's query string and key header, and an IPv6 host.

``attnload sim --require-query api-version=... --require-header api-key=...`` refuses any request
without both (400 / 401, as Azure does), so a run with no failure and as many requests as the
simulator received proves every request carried them. ``http://[::1]:PORT/v1`` runs clean against a
simulator listening on ``::1`` only.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from helpers import Processes, attnload, free_port, http_json, latest_results, wait_http

KEY = "azure-test-key-0123456789"
VERSION = "2024-10-21"


def _config(tmp_path: Path, base_url: str, models: dict[str, dict[str, Any]], name: str) -> Path:
    data = {
        "base_url": base_url,
        "api_key_env": "AZURE_OPENAI_API_KEY",
        "models": models,
        "benchmark": {"max_tokens": 16, "repeat": 1, "temperature": 0},
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def _run(processes: Processes, config: Path, results: Path, name: str) -> tuple[int, str]:
    run = processes.start(
        attnload("run", "-c", str(config), "--users", "2", "--duration", "3s", "--results", str(results))
        + ["--metrics-port", str(free_port()), "--stop-timeout", "5"],
        env={"AZURE_OPENAI_API_KEY": KEY},
        name=name,
    )
    return run.wait(timeout=90), processes.log_of(run)


def test_a_query_string_and_an_auth_header_reach_every_request(processes: Processes, tmp_path: Path) -> None:
    port = free_port()
    sim_args = ["--host", "127.0.0.1", "--port", str(port), "--mode", "fixed", "--ttft-ms", "20", "--itl-ms", "5"]
    demands = ["--require-query", f"api-version={VERSION}", "--require-header", f"api-key={KEY}"]
    sim = processes.start(attnload("sim", *sim_args, *demands), name="sim")
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", sim)
    models = {
        "azure_chat": {"id": "llama-3-70b", "attention_type": "GQA", "auth_header": "api-key"},
        "azure_responses": {"id": "deepseek-v3", "attention_type": "MLA", "auth_header": "api-key", "api": "responses"},
    }
    config = _config(tmp_path, f"{url}/v1?api-version={VERSION}", models, "azure")
    code, output = _run(processes, config, tmp_path / "azure", "run")
    assert code == 0, output
    stats = http_json(url + "/stats")["models"]
    for summary in latest_results(tmp_path / "azure")["models"]:
        requests = summary["requests"]
        assert requests["failed"] == 0 and requests["ok"] > 3, (summary["key"], summary["errors"])
        model = "llama-3-70b" if summary["key"] == "azure_chat" else "deepseek-v3"
        assert stats[model]["received"] == requests["ok"] + requests["cancelled"], (model, stats[model], requests)
    assert KEY not in output

    # the same without the header: the simulator refuses every request as Azure would (401 -> auth)
    plain = {k: {n: v for n, v in m.items() if n != "auth_header"} for k, m in models.items()}
    config = _config(tmp_path, f"{url}/v1?api-version={VERSION}", plain, "bearer")
    code, output = _run(processes, config, tmp_path / "bearer", "bearer")
    errors = [s["errors"] for s in latest_results(tmp_path / "bearer")["models"]]
    assert code == 1 and all(set(e) - {"cancelled"} == {"auth"} for e in errors), errors


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_literal_host_runs_clean(processes: Processes, tmp_path: Path) -> None:
    port = free_port()
    sim = processes.start(
        attnload("sim", "--host", "::1", "--port", str(port), "--mode", "fixed", "--ttft-ms", "20", "--itl-ms", "5"),
        name="sim",
    )
    url = f"http://[::1]:{port}"
    wait_http(url + "/health", sim)
    models = {"v6": {"id": "llama-3-70b", "attention_type": "GQA"}}
    code, output = _run(processes, _config(tmp_path, url + "/v1", models, "v6"), tmp_path / "v6", "run")
    assert code == 0, output
    (summary,) = latest_results(tmp_path / "v6")["models"]
    assert summary["requests"]["failed"] == 0 and summary["requests"]["ok"] > 3, summary["errors"]
    assert http_json(url + "/stats")["models"]["llama-3-70b"]["received"] >= summary["requests"]["ok"]
    assert " on http://[::1]:" in processes.log_of(sim)
