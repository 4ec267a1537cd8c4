"""Each ``api`` against a real vLLM (CPU build, the shared pair's tiny GQA server; marker ``vllm``): the
client's prompt and completion tokens equal vLLM's own counter deltas, whether the answer came as chat,
completions, Responses or Anthropic Messages. vLLM 0.32 serves all four from one server; its wire is what
the API objects (attnload.apis) read.
"""

from __future__ import annotations

import pytest

from attnload.apis import request_body
from attnload.client.chat import ApiClient
from attnload.client.transport import Timeouts
from attnload.config.urls import api_url
from attnload.engines.vllm import scrape
from helpers.exposition import sums_by_name
from helpers.vllm_pair import Pair

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

APIS = ("chat", "completions", "responses", "messages")
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colours, please."}]


def _counters(base_url: str) -> tuple[float, float]:
    values = sums_by_name(scrape(base_url), lambda s: s.name.startswith("vllm:") and "le" not in s.labels)
    return values["vllm:prompt_tokens_total"], values["vllm:generation_tokens_total"]


@pytest.mark.parametrize("api", APIS)
def test_each_api_counts_as_vllm(vllm_pair: Pair, api: str) -> None:
    gqa = vllm_pair.gqa
    url = api_url(f"{gqa.base_url}/v1/chat/completions", api, gqa.served_name)
    client = ApiClient(url, "sk-unused-by-vllm", Timeouts(connect_s=10, ttft_s=None, idle_s=120, total_s=300), api=api)
    before = _counters(gqa.base_url)
    records = []
    for stream in (True, True, False):
        body = request_body(
            api, gqa.served_name, MESSAGES, max_tokens=12, temperature=0, stream=stream, ignore_eos=True
        )
        records.append(client.send(body, model_key="m", profile="p", stage=0))
    client.close()
    after = _counters(gqa.base_url)
    for record in records:
        assert record.outcome == "ok", (api, record.error, client.last_failure)
        assert not record.tokens_estimated, api
        assert record.ttft_s is not None and record.completion_tokens > 0
    assert sum(r.prompt_tokens for r in records) == after[0] - before[0], api
    assert sum(r.completion_tokens for r in records) == after[1] - before[1], api
    streamed = records[0]
    assert streamed.ttfat_s is not None and streamed.ttfat_s >= streamed.ttft_s and streamed.reasoning_tokens == 0
