"""engines/: the tiny models' geometry and files, the vLLM command line, and the demo without vLLM.

No vLLM here: these run everywhere. The same code against a real vLLM is tests/e2e/test_vllm_e2e.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnload.engines import tiny_models
from attnload.engines.vllm import (
    ENV_VAR,
    INSTALL_HINT,
    ServerSpec,
    server_command,
    server_environment,
    vllm_env,
)
from helpers import FAKES, attnload, free_port


def test_kv_geometry_is_the_real_pairs() -> None:
    """llama-3-70b's KV row (8 heads × 128 × K and V) against DeepSeek-V3's latent (512 + 64 rope)."""
    gqa, mla = tiny_models.gqa_config(), tiny_models.mla_config()
    assert tiny_models.kv_elements_per_token_per_layer(gqa) == 2048
    assert tiny_models.kv_elements_per_token_per_layer(mla) == 576
    assert gqa["num_attention_heads"] > gqa["num_key_value_heads"] == 8  # grouped, not MHA
    assert mla["kv_lora_rank"] == 512 and mla["qk_rope_head_dim"] == 64  # the only shape the CPU MLA backend runs
    assert mla["first_k_dense_replace"] == mla["num_hidden_layers"] and isinstance(mla["n_routed_experts"], int)
    bytes_per_token = [tiny_models.kv_elements_per_token_per_layer(c) * tiny_models.LAYERS * 2 for c in (gqa, mla)]
    assert bytes_per_token == [16 * 1024, 4608]  # 16 KiB vs 4.5 KiB in bf16


def test_write_pair_makes_loadable_folders(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    gqa, mla = tiny_models.write_pair(tmp_path)
    for folder in (gqa, mla):
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            assert (folder / name).is_file()
        config = json.loads((folder / "config.json").read_text())
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        assert config["vocab_size"] == tokenizer.get_vocab_size()  # every id the model can emit decodes
        assert tokenizer.token_to_id("</s>") == config["eos_token_id"]
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        assert "add_generation_prompt" in settings["chat_template"] and settings["eos_token"] == "</s>"
        assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == config["eos_token_id"]
    text = "Explain the attention mechanism of a transformer. 请用 100 字介绍 Transformer 架构。"
    ids = Tokenizer.from_file(str(gqa / "tokenizer.json")).encode(text).ids
    assert 5 < len(ids) < len(text.encode())  # byte-level BPE: anything encodes, and merges were learnt
    assert json.loads((gqa / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert json.loads((mla / "config.json").read_text())["architectures"] == ["DeepseekV2ForCausalLM"]


def test_server_command_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ServerSpec(
        Path("/m/tiny-gqa"),
        "tiny-gqa",
        8123,
        core=1,
        kv_cache_bytes=8 * 2**20,
        block_size=32,
        prompt_tokens_details=False,
    )
    command = server_command(Path("/env"), spec)
    assert command[:3] == ["/env/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(command)
    for part in (
        "--load-format dummy",
        "--enforce-eager",
        "--kv-cache-memory-bytes 8388608",
        "--block-size 32",
        "--served-model-name tiny-gqa",
        "--port 8123",
        "--enable-prefix-caching",
    ):
        assert part in joined
    assert "--enable-prompt-tokens-details" not in command
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    env = server_environment(spec)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # it would override --kv-cache-memory-bytes


@pytest.mark.e2e
def test_demo_vllm_without_vllm_is_one_line_and_exit_2(tmp_path: Path) -> None:
    env_dir = tmp_path / "no-vllm-here"
    done = subprocess.run(
        attnload("demo", "--engine", "vllm", "--results", str(tmp_path / "r")),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, ENV_VAR: str(env_dir)},
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "make vllm-env" in done.stderr, done.stderr
    assert INSTALL_HINT in done.stderr and not (tmp_path / "r").exists()


def test_vllm_env_needs_vllm_inside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert vllm_env() is None  # a virtualenv without vllm is not one
    package = tmp_path / "lib" / "python3.11" / "site-packages" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    assert vllm_env() == tmp_path


def test_demo_vllm_config_loads_and_sizes_fit(tmp_path: Path) -> None:
    """The demo's config is a valid attnload config; its longest conversation fits max_model_len."""
    from attnload.commands import demo_vllm
    from attnload.config.load import load_config

    gqa, mla = demo_vllm.server_specs(tmp_path, demo_vllm.KV_CACHE_BYTES)
    assert (gqa.core, mla.core) == (0, 1) and gqa.kv_cache_bytes == mla.kv_cache_bytes
    path = tmp_path / "c.json"
    path.write_text(json.dumps(demo_vllm.demo_config(gqa, mla, tmp_path / "tokenizer.json")))
    config = load_config(path)
    assert [m.url for m in config.models] == [
        f"{gqa.base_url}/v1/chat/completions",
        f"{mla.base_url}/v1/chat/completions",
    ]
    profile = config.profile("chat")
    assert profile.ignore_eos and profile.conversation is not None
    template_tokens = 8  # bos + role markers per message, generously
    longest = demo_vllm.TURNS * (demo_vllm.USER_TOKENS + demo_vllm.MAX_TOKENS + template_tokens)
    assert longest <= demo_vllm.MAX_MODEL_LEN
    gqa_blocks = demo_vllm.KV_CACHE_BYTES // (demo_vllm.GQA_BLOCK * 16 * 1024) - 1  # less vLLM's null block
    assert gqa_blocks * demo_vllm.GQA_BLOCK >= demo_vllm.MAX_MODEL_LEN
    first_turn = demo_vllm.USER_TOKENS + demo_vllm.MAX_TOKENS + 4  # bos, <|user|>, <|assistant|>, newlines
    assert 4 * -(-first_turn // demo_vllm.GQA_BLOCK) > gqa_blocks  # 4 users/model overflow GQA from turn 1


@pytest.mark.e2e
def test_servers_are_stopped_as_groups_on_sigterm(tmp_path: Path) -> None:
    """``running()`` under SIGTERM: exit 143 and nothing left of either server's process group, the
    child that ignores SIGTERM included (vLLM's engine core outlives its api server otherwise)."""
    env_dir = tmp_path / "fake-env"
    (env_dir / "bin").mkdir(parents=True)
    package = env_dir / "lib" / "python3.11" / "site-packages" / "vllm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    fake = FAKES / "fake_vllm_server.py"
    python = env_dir / "bin" / "python"
    python.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {fake} "$@"\n')  # drops "-m vllm...api_server"
    python.chmod(0o755)
    script = (
        f"from pathlib import Path; import time; from attnload.engines.vllm import ServerSpec, running\n"
        f"specs = [ServerSpec(Path('/m'), f'm{{i}}', port, core=i, kv_cache_bytes=1)"
        f" for i, port in enumerate({[free_port(), free_port()]})]\n"
        f"with running(specs, Path({str(tmp_path)!r}) / 'logs', timeout_s=60):\n"
        f"    Path({str(tmp_path)!r}, 'ready').write_text('1'); time.sleep(120)\n"
    )
    env = {**os.environ, ENV_VAR: str(env_dir), "FAKE_VLLM_PIDS": str(tmp_path)}
    process = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert process.poll() is None and time.monotonic() < deadline, "the fake servers did not come up"
        time.sleep(0.1)
    pids = [int(p) for f in tmp_path.glob("*.pids") for p in f.read_text().split()]
    assert len(pids) == 4
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 143
    alive = [pid for pid in pids if _alive(pid)]
    assert alive == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie is gone, only unreaped


def test_demo_vllm_ladder_config_loads_and_its_longest_rung_fits(tmp_path: Path) -> None:
    """The vLLM demo's ladder: its rungs plus the answer fit the second pair's max_model_len, and the GQA
    server's KV holds one whole sequence."""
    from attnload.commands import demo_vllm
    from attnload.config.load import load_config
    from attnload.workload.ladder import check_ladder
    from attnload.workload.shapes import ContextSpec, parse_shape

    gqa, mla = demo_vllm.server_specs(tmp_path, demo_vllm.LADDER_KV_BYTES, demo_vllm.LADDER_MAX_MODEL_LEN)
    assert gqa.max_model_len == mla.max_model_len == demo_vllm.LADDER_MAX_MODEL_LEN
    path = tmp_path / "ladder.json"
    path.write_text(json.dumps(demo_vllm.ladder_config(gqa, mla, tmp_path / "tokenizer.json")))
    config = load_config(path)
    shape = parse_shape(demo_vllm.LADDER, 30.0)
    assert isinstance(shape, ContextSpec)
    check_ladder(config, shape.contexts)  # raises if a rung + max_tokens exceeds max_context
    assert max(shape.contexts) + demo_vllm.LADDER_MAX_TOKENS + 8 <= demo_vllm.LADDER_MAX_MODEL_LEN
    assert demo_vllm.LADDER_KV_BYTES // (16 * 1024) >= demo_vllm.LADDER_MAX_MODEL_LEN + demo_vllm.GQA_BLOCK
