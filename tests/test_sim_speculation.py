"""Speculative decoding and prefill interference in the simulator (docs/cost-model.md §11).

What a user checks: ``--explain`` puts MLA's verify step (query length 2) further above its normal
step than GQA's and a GLA variant's; a speculating engine emits 1 + accepted drafts per step at the
rate the acceptance sets, counts them as vLLM does and serves them under vLLM's and SGLang's names;
a long prompt among decodes stalls MLA's decoders more per prompt token than GQA's.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from attnload.commands.cli import main
from attnload.scrape.parse import parse_exposition
from attnload.sim.api import GenerationRequest, GenerationState, ServedModel
from attnload.sim.costmodel import EngineConfig, decode_step, deploy
from attnload.sim.decode.interference import prefill_stall
from attnload.sim.decode.speculation import Speculator, expected_tokens_per_step
from attnload.sim.engine import RooflineEngine, VirtualClock
from attnload.sim.factory import build_engines, resolve_models, served_model
from attnload.sim.fixed import FixedEngine
from attnload.sim.presets import PRESETS
from attnload.sim.scheduler import Scheduler, SimSequence
from attnload.sim.serving.server import build_app
from attnload.sim.simconfig import load_sim_config


def _explain_ratio(capsys: pytest.CaptureFixture[str], model: str) -> float:
    assert main(["sim", "--explain", model, "--spec-tokens", "1", "--batch", "64", "--context", "8192"]) == 0
    out = capsys.readouterr().out
    row = out.split("q=2/q=1")[1].splitlines()[2]
    return float(row.split()[3])


def test_explain_mla_pays_for_query_length_2_more_than_gqa_and_gla(capsys: pytest.CaptureFixture[str]) -> None:
    mla, gqa, gla = (_explain_ratio(capsys, m) for m in ("deepseek-v3", "llama-3-70b", "deepseek-v3-gla8"))
    assert mla > gqa and gla < mla
    assert (mla, gqa, gla) == pytest.approx((1.179, 1.106, 1.112), abs=0.002)  # docs/cost-model.md §11


def test_verify_step_doubles_mla_attention_not_gqa() -> None:
    """The attention phase alone: MLA (absorbed, compute-bound at A = 1) doubles; GQA's stays the KV read."""
    cfg = EngineConfig()
    mla, gqa = deploy(PRESETS["deepseek-v3"], cfg), deploy(PRESETS["llama-3-70b"], cfg)
    for dep, low, high in ((mla, 1.9, 2.01), (gqa, 0.99, 1.01)):
        one, two = decode_step(dep, 64, 8192), decode_step(dep, 64, 8192, 2)
        ratio = max(two.c_att_s, two.m_kv_s) / max(one.c_att_s, one.m_kv_s)
        assert low <= ratio <= high
        assert two.m_kv_s == one.m_kv_s  # the KV is read once


def _speculating(k: int, a: float, *, seqs: int = 8, tokens: int = 400) -> tuple[Scheduler, list[int]]:
    dep = deploy(PRESETS["llama-3-70b"], EngineConfig(spec_tokens=k, spec_acceptance=a, seed=3))
    sizes: list[int] = []
    first: set[SimSequence] = set()

    def on_tokens(seq: SimSequence, n: int) -> None:
        if seq in first:
            sizes.append(n)
        first.add(seq)

    sched = Scheduler(dep, on_tokens)
    for i in range(seqs):
        sched.submit(SimSequence(f"r{i}", 64, tokens), 0.0)
    now = 0.0
    while (step := sched.plan(now)) is not None:
        now += step
        sched.complete(now)
    return sched, sizes


def test_each_step_emits_one_plus_accepted_drafts() -> None:
    sched, sizes = _speculating(3, 0.6)
    full = [n for n in sizes[: len(sizes) // 2]]  # well before any answer's last (truncated) step
    assert max(full) == 4 and min(full) == 1
    assert sum(full) / len(full) == pytest.approx(expected_tokens_per_step(3, 0.6), rel=0.03)  # 2.176
    counts = sched.speculator.counts if sched.speculator else None
    assert counts is not None and counts.draft_tokens == 3 * counts.drafts
    rejections = counts.drafts - counts.accepted_per_pos[-1]
    assert counts.accepted_tokens / (counts.accepted_tokens + rejections) == pytest.approx(0.6, abs=0.02)
    assert counts.accepted_per_pos == sorted(counts.accepted_per_pos, reverse=True)


def test_every_answer_still_has_exactly_max_tokens() -> None:
    _, sizes = _speculating(4, 0.9, seqs=3, tokens=37)
    assert sum(sizes) == 3 * 36


def test_without_speculation_nothing_changes() -> None:
    _, sizes = _speculating(0, 0.6, seqs=2, tokens=20)
    assert set(sizes) == {1}


def test_metrics_serve_vllm_counters_and_sglang_gauges() -> None:
    async def run() -> str:
        (spec,) = resolve_models(["llama-3-70b"], EngineConfig(spec_tokens=2, spec_acceptance=0.5))
        dep = deploy(spec.preset, spec.cfg)
        engine = RooflineEngine(served_model(spec, dep), dep, clock=VirtualClock())
        server = TestServer(build_app([engine]), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{server.port}"
                body = {"model": "llama-3-70b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
                for _ in range(4):
                    await (await session.post(url + "/v1/chat/completions", json=body)).json()
                return await (await session.get(url + "/metrics")).text()
        finally:
            await server.close()
            await engine.aclose()

    text = asyncio.run(run())
    labels = 'engine="0",model_name="llama-3-70b"'
    drafts = re.search(r"vllm:spec_decode_num_drafts_total\{" + labels + r"\} (\S+)", text)
    draft_tokens = re.search(r"vllm:spec_decode_num_draft_tokens_total\{[^}]*\} (\S+)", text)
    assert drafts is not None and draft_tokens is not None
    assert float(drafts[1]) > 0 and float(draft_tokens[1]) == 2 * float(drafts[1])
    assert "vllm:spec_decode_num_accepted_tokens_total{" in text
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total{" + labels + ',position="1"}' in text
    assert 'sglang:spec_accept_length{model_name="llama-3-70b"}' in text
    assert parse_exposition(text).source == "attnload-sim"  # its own names still win


def test_long_prompt_stalls_mla_decoders_more_per_prompt_token() -> None:
    cfg = EngineConfig()
    stalls = {k: prefill_stall(deploy(PRESETS[k], cfg), 8, 8192, 16384) for k in ("llama-3-70b", "deepseek-v3")}
    for stall in stalls.values():
        assert max(stall.steps_s) > 5 * stall.decode_step_s
    assert stalls["deepseek-v3"].ms_per_1k_prefill_tokens > 3 * stalls["llama-3-70b"].ms_per_1k_prefill_tokens
    sglang = prefill_stall(deploy(PRESETS["llama-3-70b"], replace(cfg, mix_prefill_decode=False)), 8, 8192, 16384)
    assert not sglang.mixed and sglang.stall_s == pytest.approx(sum(sglang.steps_s))


def test_the_model_list_sets_speculation_per_model(tmp_path: Path) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text(
        "models:\n"
        "  - {id: llama-spec, preset: llama-3-70b, spec_tokens: 3, spec_acceptance: 0.6}\n"
        "  - {id: llama-3-70b}\n",
        encoding="utf-8",
    )
    spec, plain = resolve_models(None, EngineConfig(), load_sim_config(path))
    assert (spec.cfg.spec_tokens, spec.cfg.spec_acceptance, plain.cfg.spec_tokens) == (3, 0.6, 0)
    engines = build_engines([spec, plain], clock=VirtualClock())
    assert [getattr(e, "spec_counts", None) is not None for e in engines] == [True, False]


def _fixed_steps(speculator: Speculator | None, max_tokens: int) -> tuple[list[int], list[int]]:
    """What one fixed-mode request yields (``generate``) and hands its sink (``push``), step by step."""
    model = ServedModel("llama-3-70b", "GQA", "llama-3-70b")

    async def run() -> tuple[list[int], list[int]]:
        engine = FixedEngine(model, 0.0, 0.0, speculator=speculator)
        yielded = [n async for n in engine.generate(GenerationRequest("g", 8, max_tokens), GenerationState())]
        pushed: list[int] = []

        def sink(n: int) -> bool:
            pushed.append(n)
            return True

        item = engine.push(GenerationRequest("p", 8, max_tokens), GenerationState(), sink, 0.0)
        await item.done
        return yielded, pushed

    return asyncio.run(run())


def test_fixed_mode_steps_bring_one_plus_accepted_drafts() -> None:
    """Fixed mode's gaps are verify steps too: the prefill's token alone, then 1 + K at full acceptance,
    cut at the request's budget; the counters count every step."""
    speculator = Speculator(3, 1.0, seed=0)
    yielded, pushed = _fixed_steps(speculator, 14)
    assert yielded == [0, 1, 4, 4, 4, 1] and pushed == [1, 4, 4, 4, 1]
    counts = speculator.counts
    assert (counts.drafts, counts.draft_tokens, counts.accepted_tokens) == (8, 24, 24)
    assert _fixed_steps(Speculator(3, 0.0, seed=0), 5) == ([0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1])
    assert _fixed_steps(None, 3) == ([0, 1, 1, 1], [1, 1, 1])


def test_fixed_mode_takes_speculation_from_the_flags() -> None:
    (spec,) = resolve_models(["llama-3-70b"], EngineConfig(spec_tokens=2, spec_acceptance=0.5))
    (engine,) = build_engines([spec], mode="fixed")
    assert isinstance(engine, FixedEngine) and engine.spec_counts is not None
    assert engine.spec_counts.spec_tokens == 2
