"""The simulator's HTTP surface: OpenAI-shaped errors, SSE framing, usage, truth, and the seed's scripts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from attnload.sim.api import ServedModel
from attnload.sim.fixed import FixedEngine
from attnload.sim.serving.server import build_app


def engines(max_model_len: int = 4096) -> list[FixedEngine]:
    return [
        FixedEngine(ServedModel("llama-3-70b", "GQA", "llama-3-70b", max_model_len=max_model_len), 0.02, 0.002),
        FixedEngine(
            ServedModel("deepseek-v3", "MLA", "deepseek-v3", max_model_len=max_model_len, aliases=("deepseek-chat",)),
            0.02,
            0.002,
        ),
    ]


def with_server(test: Callable[[aiohttp.ClientSession, str], Awaitable[None]], **options: Any) -> None:
    async def main() -> None:
        server = TestServer(build_app(engines(), **options), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                await test(session, f"http://127.0.0.1:{server.port}")
        finally:
            await server.close()

    asyncio.run(main())


def chat(model: str = "deepseek-chat", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "test"}], "max_tokens": 10, **extra}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (json.dumps({"model": "deepseek-chat"}).encode(), 400, "missing_messages"),
        (json.dumps(chat("no-such-model")).encode(), 404, "model_not_found"),
        (json.dumps(chat(max_tokens=0)).encode(), 400, "invalid_max_tokens"),
        (
            json.dumps({**chat(), "messages": [{"role": "user", "content": "x" * 20000}]}).encode(),
            400,
            "context_length_exceeded",
        ),
    ],
)
def test_bad_requests_get_openai_shaped_errors(body: bytes, status: int, code: str) -> None:
    async def check(session: aiohttp.ClientSession, url: str) -> None:
        async with session.post(url + "/v1/chat/completions", data=body) as response:
            assert response.status == status
            error = (await response.json())["error"]
            assert error["code"] == code and error["message"] and error["type"]
        async with session.get(url + "/health") as response:  # still serving
            assert response.status == 200

    with_server(check)


def test_seed_curl_request_returns_choices() -> None:
    async def check(session: aiohttp.ClientSession, url: str) -> None:
        async with session.post(
            url + "/api/v1/chat/completions", json=chat(), headers={"Authorization": "Bearer sk-anything"}
        ) as response:
            data = await response.json()
        assert data["choices"][0]["message"]["content"].count(" ") == 10
        assert data["usage"]["completion_tokens"] == 10 and data["model"] == "deepseek-chat"

    with_server(check)


def test_stream_framing_role_chunk_usage_and_done() -> None:
    async def check(session: aiohttp.ClientSession, url: str) -> None:
        body = chat(stream=True, stream_options={"include_usage": True})
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            assert response.headers["Content-Type"].startswith("text/event-stream")
            text = await response.text()
        events = [e.removeprefix("data: ") for e in text.strip().split("\n\n")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e) for e in events[:-1]]
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 10
        assert chunks[-2]["choices"][0]["finish_reason"] == "length"
        content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-1])
        assert content.count(" ") == 10

    with_server(check)


def test_tokens_per_event_groups_later_tokens() -> None:
    async def check(session: aiohttp.ClientSession, url: str) -> None:
        async with session.post(url + "/v1/chat/completions", json=chat(stream=True)) as response:
            text = await response.text()
        contents = [json.loads(e[6:])["choices"][0]["delta"].get("content") for e in text.strip().split("\n\n")[:-1]]
        sizes = [c.count(" ") for c in contents if c]
        assert sizes == [1, 4, 4, 1]  # the first token alone, then up to 4 per event

    with_server(check, tokens_per_event=4)


def test_stats_and_metrics_are_the_truth() -> None:
    async def check(session: aiohttp.ClientSession, url: str) -> None:
        for _ in range(3):
            async with session.post(url + "/v1/chat/completions", json=chat(stream=True)) as response:
                await response.read()
        stats = (await (await session.get(url + "/stats")).json())["models"]["deepseek-v3"]
        assert (stats["received"], stats["completed"], stats["completion_tokens"]) == (3, 3, 30)
        assert stats["ttft_s"]["count"] == 3 and stats["itl_s"]["count"] == 27
        metrics = await (await session.get(url + "/metrics")).text()
        assert 'attnload_sim_requests_total{attention="MLA",model="deepseek-v3"} 3.0' in metrics
        assert "attnload_sim_kv_usage_ratio" in metrics and "attnload_sim_step_seconds_bucket" in metrics

    with_server(check)


def test_seed_aiohttp_concurrency_script() -> None:
    """Section 4's 8-way script, pointed at the simulator: total tokens over the slowest request."""

    async def check(session: aiohttp.ClientSession, url: str) -> None:
        async def one_request() -> tuple[float, int]:
            start = time.time()
            async with session.post(
                url + "/api/v1/chat/completions", json=chat(max_tokens=128), headers={"Authorization": "Bearer x"}
            ) as resp:
                data = await resp.json()
            return time.time() - start, data["usage"]["completion_tokens"]

        results = await asyncio.gather(*(one_request() for _ in range(8)))
        assert sum(tokens for _, tokens in results) == 8 * 128
        assert max(elapsed for elapsed, _ in results) < 5

    with_server(check)
