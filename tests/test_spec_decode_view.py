"""The server view of speculative decoding (``stages[].server.spec_decode``) from vLLM's counters and
SGLang's gauges, and what the results make of it: the ``server_bursts`` flag names speculation, the
verdict says what it bought against the same model without drafts."""

from __future__ import annotations

import pytest

from attnload.measure.recorder import Recorder, RequestRecord
from attnload.results.bursts import with_server_bursts
from attnload.results.decode.speculation import speculation_sentence, with_speculation
from attnload.results.model import ModelSummary, Results, ServerSummary, StageSummary, Summary, VerdictModel
from attnload.scrape import ServerSample, ServerWindow, parse_exposition
from attnload.scrape.specdecode import per_token_rate
from attnload.scrape.summary import SpecDecode

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _vllm(drafts: int, accepted: int, per_pos: tuple[int, int, int]) -> str:
    labels = f'engine="0",model_name="{MODEL}"'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} 8.0",
        "# TYPE vllm:spec_decode_num_drafts counter",
        f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}.0",
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {3 * drafts}.0",
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}.0",
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {n}.0'
        for i, n in enumerate(per_pos)
    ]
    return "\n".join(lines) + "\n"


def _sample(text: str) -> ServerSample:
    sample = parse_exposition(text).sample_for([MODEL])
    assert sample is not None
    return sample


def test_vllm_counters_give_the_per_token_acceptance() -> None:
    window = ServerWindow()
    window.add(_sample(_vllm(100, 100, (60, 30, 10))))
    # over the stage: 1000 drafts, 1176 accepted = 600 + 360 + 216 by position (A = 0.6 per token, K = 3)
    window.add(_sample(_vllm(1100, 1276, (660, 390, 226))))
    spec = window.summary().spec_decode
    assert spec is not None
    assert spec.acceptance_rate == pytest.approx(1176 / (1176 + 1000 - 216))  # 0.6
    assert spec.acceptance_rate == pytest.approx(0.6)
    assert spec.mean_accepted_tokens == pytest.approx(1.176) and spec.tokens_per_step == pytest.approx(2.176)
    assert spec.draft_tokens == 3000 and spec.draft_acceptance_rate == pytest.approx(0.392)


def test_sglang_gauges_give_the_same_numbers() -> None:
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        f'sglang:num_running_reqs{{model_name="{MODEL}",tp_rank="0"}} 8.0\n'
        "# TYPE sglang:spec_accept_length gauge\n"
        f'sglang:spec_accept_length{{model_name="{MODEL}",tp_rank="0"}} 2.176\n'
        "# TYPE sglang:spec_accept_rate gauge\n"
        f'sglang:spec_accept_rate{{model_name="{MODEL}",tp_rank="0"}} 0.392\n'
    )
    window = ServerWindow()
    window.add(_sample(text))
    window.add(_sample(text))
    spec = window.summary().spec_decode
    assert spec is not None and spec.draft_tokens is None
    assert spec.acceptance_rate == pytest.approx(0.6, abs=1e-6) and spec.tokens_per_step == pytest.approx(2.176)
    assert per_token_rate(5.0, 3) == 1.0


def _record(itl: tuple[tuple[float, int], ...]) -> RequestRecord:
    return RequestRecord("spec", "p", 0, "ok", None, 0.05, itl, 1.0, 10, 1 + sum(n for _, n in itl), None, False)


def test_speculating_servers_multi_token_writes_are_its_own_not_the_clients() -> None:
    recorder = Recorder()
    for _ in range(50):  # every event of 2 or 3 tokens after a step's gap: ITL never collapses
        recorder.add(_record(((0.01, 2), (0.007, 3)) * 20))
    spec = SpecDecode(acceptance_rate=0.6, mean_accepted_tokens=1.4, tokens_per_step=2.4)
    stage = StageSummary(index=0, server=ServerSummary(spec_decode=spec))
    results = Results.model_construct(
        models=[ModelSummary(key="spec", model="m", attention="GQA", stages=[stage], server=stage.server)]
    )
    flagged = with_server_bursts(results, recorder, behind="worker CPU reached 90%").models[0]
    bursts = flagged.stages[0].server_bursts
    assert bursts is not None and bursts.reason == "speculation" and "server_bursts" in flagged.stages[0].flags
    assert "not client delay" in bursts.note


def test_verdict_says_what_speculation_bought_against_the_same_model() -> None:
    spec = ServerSummary(spec_decode=SpecDecode(acceptance_rate=0.6, tokens_per_step=2.18))
    fast = ModelSummary(
        key="spec", model="m", attention="GQA", server=spec, tokens_per_step=2.17, itl_s=Summary(p50=0.003)
    )
    slow = ModelSummary(key="plain", model="m", attention="GQA", itl_s=Summary(p50=0.006))
    verdict = with_speculation(VerdictModel(target="spec"), fast, [fast, slow])
    assert verdict.baseline == "plain" and verdict.itl_speedup == pytest.approx(2.0)
    text = speculation_sentence(verdict)
    assert text is not None and "2.17 tokens per decode step" in text and "2.00× faster per token than plain" in text
    assert with_speculation(VerdictModel(target="plain"), slow, [fast, slow]).tokens_per_step is None
