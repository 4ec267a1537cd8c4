"""The four APIs through a real gateway: LiteLLM's proxy (its own env, ``make litellm-env``) in front of the
simulator (marker ``gateway``; ``make test-gateway``, a CI step of its own).

The simulator in fixed mode answers with a 50 ms TTFT; through LiteLLM each API must still count exactly
the simulator's tokens (its ``/stats``), its TTFT must exceed 50 ms by the gateway's own cost, and the
server view, reading the simulator's /metrics through the model's ``metrics_url``, must show the gap
(the server's TTFT at the simulator's, the client's above it). An unknown model through the gateway is
``not_found`` (LiteLLM answers 400 "Invalid model name passed in model=...").

LiteLLM is run offline the way docs/troubleshooting.md says: without ``HF_HUB_OFFLINE=1`` it stalls
each first request ~23 s looking for a tokenizer on the internet, and without
``LITELLM_LOCAL_MODEL_COST_MAP=True`` it fetches its price list at start.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers import DIRECT, ROOT, Processes, attnload, free_port, http_json, latest_results, wait_http

pytestmark = [pytest.mark.gateway, pytest.mark.timeout(600)]

MASTER_KEY = "sk-gateway-test-12345678"
SIM_TTFT_MS = 50.0
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
"""LiteLLM's variables for a machine without internet (docs/troubleshooting.md)."""
APIS = ("chat", "completions", "responses", "messages")


def litellm_binary() -> Path | None:
    # absolute: the proxy starts in its own temporary directory, and make passes the env relative to the root
    env = Path(os.environ.get("ATTNLOAD_LITELLM_ENV", ROOT / ".venv-litellm")).resolve()
    binary = env / "bin" / "litellm"
    return binary if binary.is_file() else None


@dataclass(frozen=True)
class Gateway:
    url: str
    sim: str


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    binary = litellm_binary()
    if binary is None:
        pytest.skip("no LiteLLM env: `make litellm-env` (or ATTNLOAD_LITELLM_ENV=DIR)")
    root = tmp_path_factory.mktemp("gateway")
    processes = Processes(root)
    try:
        sim_port, port = free_port(), free_port()
        sim = processes.start(
            attnload("sim", "--host", "127.0.0.1", "--port", str(sim_port), "--models", "llama-3-70b")
            + ["--mode", "fixed", "--ttft-ms", f"{SIM_TTFT_MS:g}", "--itl-ms", "10"],
            name="sim",
        )
        sim_url = f"http://127.0.0.1:{sim_port}"
        wait_http(sim_url + "/health", sim)
        config = root / "litellm.yaml"
        config.write_text(
            "model_list:\n"
            "  - model_name: llama-3-70b\n"
            "    litellm_params:\n"
            "      model: openai/llama-3-70b\n"
            f"      api_base: {sim_url}/v1\n"
            "      api_key: sk-sim-unused\n"
        )
        proxy = processes.start(
            [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
            env={**OFFLINE, "LITELLM_MASTER_KEY": MASTER_KEY, "NO_PROXY": "*"},
            name="litellm",
            cwd=root,
        )
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/health/liveliness", proxy, timeout_s=240)
        yield Gateway(url, sim_url)
    finally:
        processes.stop_all()
        shutil.rmtree(root / "results", ignore_errors=True)


def _config(tmp_path: Path, gateway: Gateway, api: str, model: str = "llama-3-70b") -> Path:
    data: dict[str, Any] = {
        "base_url": gateway.url + "/v1",
        "api_key_env": "LITELLM_KEY",
        "models": {api: {"id": model, "attention_type": "GQA", "api": api, "metrics_url": gateway.sim + "/metrics"}},
        "benchmark": {"max_tokens": 24, "repeat": 1, "temperature": 0},
    }
    path = tmp_path / f"{api}-{model}.json"
    path.write_text(json.dumps(data))
    return path


def _run(processes: Processes, config: Path, results: Path, duration: str = "6s") -> tuple[int, str]:
    run = processes.start(
        attnload("run", "-c", str(config), "--users", "4", "--duration", duration, "--results", str(results))
        + ["--metrics-port", str(free_port()), "--stop-timeout", "10", "--server-metrics-interval", "0.5"],
        env={"LITELLM_KEY": MASTER_KEY, "NO_PROXY": "*"},
        name=results.name,
    )
    return run.wait(timeout=180), processes.log_of(run)


def _truth(gateway: Gateway) -> dict[str, int]:
    stats: dict[str, int] = http_json(gateway.sim + "/stats")["models"]["llama-3-70b"]
    return stats


@pytest.mark.parametrize("api", APIS)
def test_each_api_through_the_gateway_counts_the_simulators_tokens_and_shows_its_cost(
    gateway: Gateway, processes: Processes, tmp_path: Path, api: str
) -> None:
    before = _truth(gateway)
    code, output = _run(processes, _config(tmp_path, gateway, api), tmp_path / "results")
    after = _truth(gateway)
    assert code == 0, output
    (summary,) = latest_results(tmp_path / "results")["models"]
    requests = summary["requests"]
    assert requests["failed"] == 0 and requests["ok"] >= 5, (api, summary["errors"])
    assert requests["cancelled"] == 0, requests  # --stop-timeout: every request finished, so the counts are whole
    assert after["completed"] - before["completed"] == requests["ok"], (after, before)
    assert summary["completion_tokens"] == after["completion_tokens"] - before["completion_tokens"], api
    if not summary["estimated_tokens"]:
        assert summary["prompt_tokens"] == after["prompt_tokens"] - before["prompt_tokens"], api
    ttft_ms = summary["ttft_s"]["p50"] * 1000
    assert ttft_ms > SIM_TTFT_MS + 2, (api, ttft_ms)  # the gateway's own cost, on top of the simulator's
    (stage,) = summary["stages"]
    server = stage["server"]
    assert server is not None and server["ttft_p50_s"] is not None, stage
    gap_ms = ttft_ms - server["ttft_p50_s"] * 1000
    assert gap_ms > 2, (api, ttft_ms, server)  # the server view: client above server by the gateway's cost
    assert abs(server["ttft_p50_s"] * 1000 - SIM_TTFT_MS) < 25, server  # the server's TTFT is the simulator's
    assert MASTER_KEY not in output


def test_an_unknown_model_through_the_gateway_is_not_found(
    gateway: Gateway, processes: Processes, tmp_path: Path
) -> None:
    code, output = _run(processes, _config(tmp_path, gateway, "chat", "gpt-9"), tmp_path / "unknown", "3s")
    (summary,) = latest_results(tmp_path / "unknown")["models"]
    assert code == 1 and set(summary["errors"]) - {"cancelled"} == {"not_found"}, (summary["errors"], output)
    assert summary["requests"]["failed"] <= 50  # backed off, not hammered


def test_the_gateway_answers_its_first_request_quickly_offline(gateway: Gateway) -> None:
    """With the offline variables set, no first request stalls on a tokenizer download (docs/troubleshooting.md)."""
    body = json.dumps({"model": "llama-3-70b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    request = _request(gateway.url + "/v1/chat/completions", body.encode())
    started = time.perf_counter()
    with DIRECT.open(request, timeout=60) as reply:
        assert json.load(reply)["usage"]["completion_tokens"] == 4
    assert time.perf_counter() - started < 10


def _request(url: str, data: bytes) -> Any:
    import urllib.request

    return urllib.request.Request(
        url, data, {"Content-Type": "application/json", "Authorization": f"Bearer {MASTER_KEY}"}
    )
