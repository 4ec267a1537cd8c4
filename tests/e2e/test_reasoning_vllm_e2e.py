"""Reasoning deltas from a real vLLM (CPU build; marker ``vllm``) started with ``--reasoning-parser deepseek_r1``
on a tiny model whose tokenizer holds the think markers and whose template opens ``<think>`` in the prompt.

Random weights make the reasoning/answer split arbitrary (vLLM's ``thinking_token_budget`` forces the
end marker), which is fine: the client's reasoning tokens must equal the reasoning deltas vLLM streamed
(counted here by a read of our own), TTFAT must not come before TTFT, and vLLM's own count is reported
beside the client's.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from attnload.apis import request_body
from attnload.client.chat import ApiClient
from attnload.client.transport import Timeouts
from attnload.config.urls import api_url
from attnload.engines import tiny_models
from attnload.engines.vllm import INSTALL_HINT, ServerSpec, running, vllm_env
from helpers import DIRECT, free_port

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

MESSAGES = [{"role": "user", "content": "Think, then name a colour."}]


@pytest.fixture(scope="module")
def reasoning(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerSpec, int]]:
    if vllm_env() is None:
        pytest.skip(INSTALL_HINT)
    root = tmp_path_factory.mktemp("vllm-reasoning")
    folder, end_id = tiny_models.write_reasoning(root / "models")
    spec = ServerSpec(
        folder,
        tiny_models.REASONING_NAME,
        free_port(),
        core=0,
        kv_cache_bytes=8 * 2**20,
        max_model_len=448,
        block_size=32,
        max_num_seqs=4,
        extra_args=("--reasoning-parser", "deepseek_r1"),
    )
    with running([spec], root / "logs"):
        yield spec, end_id


def _reasoning_deltas(spec: ServerSpec, body: dict[str, Any]) -> tuple[int, int]:
    """(reasoning deltas, content deltas) of one chat stream, read with nothing of attnload's."""
    request = urllib.request.Request(
        f"{spec.base_url}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    reasoning = content = 0
    with DIRECT.open(request, timeout=300) as response:
        for line in response:
            if not line.startswith(b"data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices") or []:
                delta = choice.get("delta") or {}
                reasoning += bool(delta.get("reasoning") or delta.get("reasoning_content"))
                content += bool(delta.get("content"))
    return reasoning, content


@pytest.mark.parametrize("budget", [None, 8])
def test_chat_reasoning_tokens_are_the_streamed_reasoning_deltas(
    reasoning: tuple[ServerSpec, int], budget: int | None
) -> None:
    """Unbounded, the random model never ends its reasoning (vLLM then reports 0 reasoning tokens); with
    ``thinking_token_budget`` vLLM forces the end marker after 8, so the answer begins and TTFAT > TTFT."""
    spec, _ = reasoning
    body = request_body("chat", spec.served_name, MESSAGES, max_tokens=24, temperature=0)
    if budget is not None:
        body["thinking_token_budget"] = budget
    streamed, answered = _reasoning_deltas(spec, body)
    client = ApiClient(f"{spec.base_url}/v1/chat/completions", None, Timeouts(10, None, 120, 300))
    record = client.send(body, model_key="m", profile="p", stage=0)
    client.close()
    assert record.outcome == "ok" and not record.tokens_estimated, record.error
    assert record.reasoning_tokens == streamed, (record.reasoning_tokens, streamed, answered)
    assert (record.ttfat_s is None) == (answered == 0)
    if record.ttfat_s is not None:
        assert record.ttft_s is not None and record.ttfat_s >= record.ttft_s
    if budget is not None:
        assert 0 < record.reasoning_tokens <= budget and answered > 0
        assert record.ttft_s is not None and record.ttfat_s is not None and record.ttfat_s > record.ttft_s
    assert isinstance(record.server_reasoning_tokens, int)  # vLLM's own count, beside ours (it may say 0)
    print(
        f"budget {budget}: client {record.reasoning_tokens}, vLLM {record.server_reasoning_tokens}, answer {answered}"
    )


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_responses_and_messages_stream_the_reasoning_apart(reasoning: tuple[ServerSpec, int], api: str) -> None:
    spec, _ = reasoning
    chat = request_body("chat", spec.served_name, MESSAGES, max_tokens=24, temperature=0)
    streamed, answered = _reasoning_deltas(spec, chat)
    url = api_url(f"{spec.base_url}/v1/chat/completions", api, spec.served_name)
    client = ApiClient(url, "sk-unused", Timeouts(10, None, 120, 300), api=api)
    record = client.send(
        request_body(api, spec.served_name, MESSAGES, max_tokens=24, temperature=0), model_key="m", profile="p", stage=0
    )
    client.close()
    assert record.outcome == "ok" and not record.tokens_estimated, record.error
    assert record.reasoning_tokens == streamed, (api, record.reasoning_tokens, streamed, answered)
    assert (record.ttfat_s is None) == (answered == 0)
