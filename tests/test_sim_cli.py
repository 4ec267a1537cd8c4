"""``attnload sim``: flags, --list, --explain, refusals (exit 2, one line), config files, serving."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from attnload.commands.cli import build_parser, main
from attnload.errors import UsageError
from attnload.sim import cli as sim_cli
from attnload.sim.costmodel import EngineConfig
from attnload.sim.engine import RooflineEngine
from attnload.sim.factory import build_engines, resolve_models
from attnload.sim.simconfig import load_sim_config


def parse(*argv: str) -> Any:
    return build_parser("sim").parse_args(["sim", *argv])


def test_every_engine_default_is_a_flag() -> None:
    assert sim_cli.engine_config(parse()) == EngineConfig()
    args = parse()
    assert (args.host, args.port, args.mode, args.ttft_ms, args.itl_ms, args.output_tokens) == (
        "127.0.0.1",
        8000,
        "roofline",
        200.0,
        20.0,
        256,
    )
    assert args.models is None and args.tokens_per_event == 1 and args.max_waiting is None
    assert args.clock == "wall"


def test_flags_map_to_engine_config() -> None:
    args = parse(
        "--gpu",
        "H100",
        "--tp",
        "4",
        "--dp-attention",
        "2",
        "--weight-dtype",
        "bf16",
        "--kv-dtype",
        "fp8",
        "--block-size",
        "32",
        "--max-num-seqs",
        "64",
        "--max-num-batched-tokens",
        "4096",
        "--preemption",
        "none",
        "--no-prefix-cache",
        "--moe-weight-traffic",
        "active",
        "--kv-capacity-scale",
        "0.05",
        "--seed",
        "7",
        "--eff-gemm",
        "0.5",
        "--eff-attn",
        "0.5",
        "--eff-bw",
        "0.9",
        "--step-overhead-ms",
        "2",
        "--allreduce-latency-us",
        "4",
        "--dp-gather-latency-us",
        "3",
        "--gpu-memory-utilization",
        "0.8",
        "--reserve-gb",
        "2",
    )
    assert sim_cli.engine_config(args) == EngineConfig(
        gpu="h100",
        tp=4,
        dp_attention=2,
        weight_dtype="bf16",
        kv_dtype="fp8",
        block_size=32,
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        preemption="none",
        prefix_cache=False,
        moe_weight_traffic="active",
        kv_capacity_scale=0.05,
        seed=7,
        eff_gemm=0.5,
        eff_attn=0.5,
        eff_bw=0.9,
        step_overhead_ms=2.0,
        allreduce_latency_us=4.0,
        dp_gather_latency_us=3.0,
        gpu_memory_utilization=0.8,
        reserve_gb=2.0,
    )
    assert parse("--models", "deepseek-chat, llama-3-70b").models == ["deepseek-chat", "llama-3-70b"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--tp", "0"],
        ["--kv-capacity-scale", "0"],
        ["--kv-capacity-scale", "1.5"],
        ["--gpu", "b200"],
        ["--dp-attention", "many"],
        ["--port", "70000"],
        ["--mode", "fast"],
        ["--eff-bw", "nan"],
        ["--preemption", "swap"],
        ["--jitter", "1"],
        ["--batch", "1,x"],
    ],
)
def test_bad_flag_values_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["sim", *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_list_prints_presets_at_configured_parallelism(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--list"]) == 0
    out = capsys.readouterr().out
    for text in (
        "llama-3-70b",
        "deepseek-v3-gla8",
        "generic-mqa",
        "qwen2.5-72b",
        "327680",
        "40960",
        "70272",
        "2,882,816",
        "3,761,152",
        "deepseek-chat",
    ):
        assert text in out
    assert main(["sim", "--list", "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert "does not fit" in out and "1,542,496" in out


def test_explain_prints_the_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--explain", "deepseek-chat", "--batch", "1,256", "--context", "8192"]) == 0
    out = capsys.readouterr().out
    for text in (
        "deepseek-v3",
        "MLA",
        "D=8",
        "70,272 per GPU",
        "456 sequences",
        "698.8 ms",
        "24.42",
        "4.80",
        "7.51",
        "2.28",
        "38.34",
        "26.1",
        "weights",
        "t_comm",
        "grouped-GEMM efficiency",
        "DP padding",
        "EP all-to-all",
        "MLA prefill up-projection",
        "prefill/decode interference",
        "DP helps; costs if all on one rank",
        "DP costs",
    ):
        assert text in out, text
    assert main(["sim", "--explain", "llama-3-70b", "--context", "32768", "--batch", "256"]) == 0
    out = capsys.readouterr().out
    assert "98.81" in out and "256†" in out  # beyond KV capacity at 32K (87 sequences)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu", "h100"], "deepseek-v3 does not fit 8×h100"),
        (["--gpu", "h100", "--dp-attention", "1"], "83.88 GB/GPU"),
        (["--dp-attention", "3"], "does not divide tp 8"),
        (["--models", "gpt-4o"], "unknown model 'gpt-4o'"),
        (["--explain", "deepseek-v3", "--gpu", "h100"], "does not fit"),
        (["--models", "llama-3-70b,LLAMA-3-70B"], "listed twice"),
        (["--config", "/nonexistent/sim.yaml"], "cannot read sim config"),
    ],
)
def test_refusals_exit_2_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("attnload.sim.serving.server.serve", _no_serve)
    assert main(["sim", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def _no_serve(*args: object, **kwargs: object) -> None:
    raise AssertionError("serve must not be reached")


def test_run_serves_default_pair_under_client_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []
    monkeypatch.setattr("attnload.sim.serving.server.serve", lambda engines, **kw: calls.append((engines, kw)))
    assert (
        main(["sim", "--port", "0", "--tokens-per-event", "4", "--output-tokens", "64", "--kv-capacity-scale", "0.05"])
        == 0
    )
    engines, kw = calls[0]
    assert [(e.model.id, e.model.attention) for e in engines] == [("llama-3-70b", "GQA"), ("deepseek-v3", "MLA")]
    assert all(isinstance(e, RooflineEngine) for e in engines)
    assert kw == {
        "host": "127.0.0.1",
        "port": 0,
        "tokens_per_event": 4,
        "default_output_tokens": 64,
        "max_waiting": None,
    }
    assert engines[1].model.details["dp_attention"] == 8 and engines[0].model.details["dp_attention"] == 1
    assert engines[1].model.details["max_seqs_at_8k"] == 16  # 1469 blocks per group at scale 0.05: 2 × 8
    assert "deepseek-chat" in engines[1].model.aliases
    assert main(["sim", "--models", "deepseek-chat,Meta-Llama-3-70B-Instruct", "--mode", "fixed"]) == 0
    engines, _ = calls[1]
    assert [(e.model.id, e.model.preset) for e in engines] == [
        ("deepseek-chat", "deepseek-v3"),
        ("Meta-Llama-3-70B-Instruct", "llama-3-70b"),
    ]
    assert type(engines[0]).__name__ == "FixedEngine"


SIM_CONFIGS = {
    "sim.json": json.dumps(
        {
            "models": [
                {"id": "deepseek-chat"},
                {"id": "my-mla", "attention_type": "mla", "dp_attention": 1},
                {"id": "big-gqa", "preset": "llama-3-70b", "gpu": "h100", "kv_capacity_scale": 0.5, "h_kv": 16},
            ]
        }
    ),
    "sim.toml": (
        '[[models]]\nid = "deepseek-chat"\n[[models]]\nid = "my-mla"\nattention_type = "MLA"\n'
        'dp_attention = 1\n[[models]]\nid = "big-gqa"\npreset = "llama-3-70b"\ngpu = "h100"\n'
        "kv_capacity_scale = 0.5\nh_kv = 16\n"
    ),
    "sim.yaml": (
        "models:\n  - {id: deepseek-chat}\n  - {id: my-mla, attention_type: MLA, dp_attention: 1}\n"
        "  - {id: big-gqa, preset: llama-3-70b, gpu: h100, kv_capacity_scale: 0.5, h_kv: 16}\n"
    ),
}


@pytest.mark.parametrize("name", SIM_CONFIGS)
def test_sim_config_formats(name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_text(SIM_CONFIGS[name])
    specs = resolve_models(None, EngineConfig(), load_sim_config(path))
    assert [(s.id, s.preset.key) for s in specs] == [
        ("deepseek-chat", "deepseek-v3"),
        ("my-mla", "generic-mla"),
        ("big-gqa", "llama-3-70b"),
    ]
    assert specs[1].cfg.dp_attention == 1 and specs[2].cfg.gpu == "h100" and specs[2].cfg.kv_capacity_scale == 0.5
    assert specs[2].preset.h_kv == 16 and specs[2].preset.synthetic
    engines = build_engines(specs)
    assert engines[2].model.details["kv_bytes_per_token_per_gpu"] == 81920  # 16 KV heads over 8 GPUs
    only = resolve_models(["my-mla"], EngineConfig(), load_sim_config(path))
    assert [s.id for s in only] == ["my-mla"]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("bad.json", '{"models": [\n{"id": "x",}]}', "bad.json:2: invalid JSON"),
        ("bad.yaml", "models:\n  - {id: x\n", "bad.yaml:3: invalid YAML"),
        ("bad.toml", "models = [", "invalid TOML"),
        ("typo.yaml", "models:\n  - {id: x, attention_type: MLA, tpp: 4}\n", "models.0.tpp: Extra inputs"),
        ("type.yaml", "models:\n  - {id: x, attention_type: linear}\n", "valid: GQA, MLA, GTA, GLA, MHA, MQA"),
        ("empty.yaml", "models: []\n", "models"),
        ("cfg.ini", "[x]\n", "unknown sim config format"),
    ],
)
def test_sim_config_errors_are_one_line(name: str, text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        load_sim_config(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_sim_config_preset_and_type_must_agree(tmp_path: Path) -> None:
    path = tmp_path / "sim.yaml"
    path.write_text("models:\n  - {id: x, preset: llama-3-70b, attention_type: MLA}\n")
    with pytest.raises(UsageError, match="is GQA, not attention_type MLA"):
        resolve_models(None, EngineConfig(), load_sim_config(path))


def test_7_11_fixed_mode_is_identical_for_same_body_and_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnload.sim import fixed
    from attnload.sim.api import GenerationRequest, GenerationState

    delays: list[float] = []
    deadlines: list[float] = []

    async def fake_sleep(delay: float) -> None:
        # The engine sleeps to absolute deadlines, so each delay also holds the real time spent so far; the
        # deadlines themselves are the schedule (the first delay is the TTFT: nothing ran before it).
        delays.append(delay)
        deadlines.append(asyncio.get_running_loop().time() + delay)

    monkeypatch.setattr(fixed.asyncio, "sleep", fake_sleep)

    def schedule(digest: bytes, seed: int) -> list[float]:
        delays.clear()
        deadlines.clear()
        (engine,) = build_engines(
            resolve_models(["llama-3-70b"], EngineConfig(seed=seed)), mode="fixed", ttft_s=0.2, itl_s=0.02, jitter=0.5
        )

        async def go() -> None:
            async for _ in engine.generate(GenerationRequest("r", 10, 20, body_digest=digest), GenerationState()):
                pass

        asyncio.run(go())
        return [delays[0]] + [d - deadlines[0] for d in deadlines[1:]]

    first = schedule(b"body-a", 0)
    assert first == pytest.approx(schedule(b"body-a", 0), abs=2e-3)
    assert first != pytest.approx(schedule(b"body-b", 0), abs=2e-3)
    assert first != pytest.approx(schedule(b"body-a", 1), abs=2e-3)


async def _stream(client: Any, model: str, content: str, max_tokens: int) -> tuple[list[tuple[float, str]], Any]:
    import time

    resp = await client.post(
        "/v1/chat/completions",
        json={
            "model": model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert resp.status == 200, await resp.text()
    events: list[tuple[float, str]] = []
    usage = None
    buffer = b""
    async for chunk in resp.content.iter_any():
        now = time.perf_counter()
        buffer += chunk
        while b"\n\n" in buffer:
            raw, buffer = buffer.split(b"\n\n", 1)
            data = raw.decode()[len("data: ") :]
            if data == "[DONE]":
                continue
            payload = json.loads(data)
            if payload.get("usage"):
                usage = payload["usage"]
            for choice in payload["choices"]:
                text = choice["delta"].get("content")
                if text:
                    events.append((now, text))
    return events, usage


def test_http_routes_aliases_and_reports_cached_tokens() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from attnload.sim.serving.server import build_app

    async def main_() -> None:
        engines = build_engines(resolve_models(None, EngineConfig(kv_capacity_scale=0.05)))
        client = TestClient(TestServer(build_app(engines)))
        await client.start_server()
        try:
            models = await (await client.get("/v1/models")).json()
            assert [m["id"] for m in models["data"]] == ["llama-3-70b", "deepseek-v3"]
            assert models["data"][1]["details"]["kv_bytes_per_token_per_gpu"] == 70272
            prompt = "x" * 4000  # ~1000 tokens, 62 full 64-byte blocks
            for model in ("deepseek-chat", "meta-llama/Meta-Llama-3-70B-Instruct"):
                events, usage = await _stream(client, model, prompt, 5)
                assert sum(len(t.split()) for _, t in events) == 5 and usage["completion_tokens"] == 5
                _, usage = await _stream(client, model, prompt, 5)
                assert usage["prompt_tokens_details"]["cached_tokens"] >= 900
            missing = await client.post(
                "/v1/chat/completions", json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
            )
            assert missing.status == 404
        finally:
            await client.close()
            for engine in engines:
                await engine.aclose()  # type: ignore[attr-defined]

    asyncio.run(main_())


def test_7_11_tokens_per_event_keeps_client_mean_itl() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from attnload.sim.serving.server import build_app

    async def main_() -> list[float]:
        engines = build_engines(resolve_models(["llama-3-70b"], EngineConfig()), mode="fixed", ttft_s=0.05, itl_s=0.02)
        client = TestClient(TestServer(build_app(engines, tokens_per_event=4)))
        await client.start_server()
        try:
            events, _ = await _stream(client, "llama-3-70b", "hello", 41)
        finally:
            await client.close()
        assert len(events) == 11  # the first token alone, then 10 events of 4
        gaps = []  # chunk-correct ITL: each event's gap spread over its tokens
        for (t0, _), (t1, text) in zip(events, events[1:], strict=False):
            k = len(text.split())
            gaps += [(t1 - t0) / k] * k
        return gaps

    gaps = asyncio.run(main_())
    assert len(gaps) == 40
    assert sum(gaps) / len(gaps) == pytest.approx(0.02, rel=0.01)
