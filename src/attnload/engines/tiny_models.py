"""Write two tiny random-weight models with the real GQA/MLA pair's KV geometry, never downloaded.

Why: a real vLLM must load *some* model, and its own KV accounting should show what the
simulator models: llama-3-70b keeps 8 KV heads × 128 dims × (K and V) = 2048 elements per
token per layer, DeepSeek-V3 keeps its 512-dim latent plus the 64-dim rope key = 576.
These folders hold only ``config.json``, a tokenizer trained here with ``tokenizers`` (with
a chat template) and ``generation_config.json``; vLLM serves them with ``--load-format dummy``
(random weights), so nothing is fetched from a hub.

    python -m attnload.engines.tiny_models OUT_DIR      # writes OUT_DIR/tiny-gqa, OUT_DIR/tiny-mla
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from attnload.workload.prompts import filler_text

if TYPE_CHECKING:  # tokenizers is an optional extra, imported where a tokenizer is trained
    from tokenizers import Tokenizer

HIDDEN = 1024
LAYERS = 4
MAX_POSITIONS = 4096
VOCAB = 4096
GQA_NAME, MLA_NAME = "tiny-gqa", "tiny-mla"
SPECIALS = ("<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<pad>")
BOS_ID, EOS_ID = 0, 1
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
_WORDS = (
    "the attention of a transformer keeps keys and values for every token in a cache whose size "
    "decides how many requests a server can hold latent projection grouped query heads share "
    "memory bandwidth prefill decode batch scheduler queue preemption prefix block tokens "
    "model context length throughput latency 请用 字介绍 架构 注意力 机制 显存 带宽 推理"
).split()


def _common() -> dict[str, object]:
    return {
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "intermediate_size": 2816,
        "vocab_size": VOCAB,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "initializer_range": 0.02,
    }


def gqa_config() -> dict[str, object]:
    """Llama-style GQA: 16 query heads share 8 KV heads of 128 dims (llama-3-70b's KV row)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **_common(),
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "attention_bias": False,
    }


def mla_config() -> dict[str, object]:
    """DeepSeek-V2-style MLA: latent 512 + rope key 64 (DeepSeek-V3's row; the CPU MLA backend runs only these).

    Every layer is dense (``first_k_dense_replace`` = layers), but vLLM's DeepSeek-V2 code still
    reads the expert fields as integers, so they are set.
    """
    return {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        **_common(),
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "first_k_dense_replace": LAYERS,
        "moe_layer_freq": 1,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 512,
        "topk_method": "greedy",
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 1.0,
        "scoring_func": "softmax",
        "norm_topk_prob": False,
        "rope_scaling": None,
        "attention_bias": False,
    }


def kv_elements_per_token_per_layer(config: dict[str, object]) -> int:
    """What the KV cache keeps per token and layer: 2·heads·dim (GQA) or latent + rope (MLA)."""
    if "kv_lora_rank" in config:
        return _count(config, "kv_lora_rank") + _count(config, "qk_rope_head_dim")
    return 2 * _count(config, "num_key_value_heads") * _count(config, "head_dim")


def _count(config: dict[str, object], key: str) -> int:
    value = config[key]
    if not isinstance(value, int):
        raise TypeError(f"{key} is {value!r}, not a whole number")
    return value


def _train_tokenizer(vocab: int) -> Tokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIALS),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    # attnload's own prompt filler and salts are in the corpus, so its prompts tokenize to sensible lengths
    corpus = [
        " ".join(_WORDS[(i * 7 + j * 13) % len(_WORDS)] for j in range(40)) + f" {i} {i * 37 % 1000} {i:08x}"
        for i in range(2000)
    ] + [filler_text(2000, seed=i) for i in range(200)]
    tokenizer.train_from_iterator(corpus, trainer=trainer)
    return tokenizer


def write_model(folder: Path, config: dict[str, object], tokenizer: Tokenizer) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config = {**config, "vocab_size": tokenizer.get_vocab_size()}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    tokenizer.save(str(folder / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIALS[BOS_ID],
        "eos_token": SPECIALS[EOS_ID],
        "pad_token": "<pad>",
        "model_max_length": MAX_POSITIONS,
        "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": SPECIALS[BOS_ID], "eos_token": SPECIALS[EOS_ID], "pad_token": "<pad>"}) + "\n",
        encoding="utf-8",
    )
    generation = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "do_sample": False}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n", encoding="utf-8")


THINK_START, THINK_END = "<think>", "</think>"
"""The think markers vLLM's ``deepseek_r1`` reasoning parser looks up as single tokens."""
REASONING_NAME = "tiny-reasoning"
REASONING_TEMPLATE = CHAT_TEMPLATE.replace("<|assistant|>\n{% endif %}", "<|assistant|>\n<think>\n{% endif %}")
"""The template opens ``<think>`` in the prompt, as DeepSeek-R1's does: the output starts inside the reasoning."""


def write_reasoning(out: Path) -> tuple[Path, int]:
    """A tiny GQA model whose tokenizer holds the think markers (added tokens, ``vocab_size`` raised to cover
    their ids) and whose template opens ``<think>``; returns its folder and the end marker's token id
    (a ``logit_bias`` on it moves where the random-weight model ends its reasoning)."""
    tokenizer = _train_tokenizer(VOCAB)
    tokenizer.add_special_tokens([THINK_START, THINK_END])
    folder = out / REASONING_NAME
    write_model(folder, gqa_config(), tokenizer)
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["chat_template"] = REASONING_TEMPLATE
    config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    end_id = tokenizer.token_to_id(THINK_END)
    assert end_id is not None
    return folder, end_id


def write_pair(out: Path) -> tuple[Path, Path]:
    """Both model folders under ``out`` (same tokenizer, so one prompt is the same tokens to both)."""
    tokenizer = _train_tokenizer(VOCAB)
    gqa, mla = out / GQA_NAME, out / MLA_NAME
    write_model(gqa, gqa_config(), tokenizer)
    write_model(mla, mla_config(), tokenizer)
    return gqa, mla


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnload.engines.tiny_models", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write tiny-gqa/ and tiny-mla/ into")
    args = parser.parse_args(argv)
    try:
        gqa, mla = write_pair(args.out)
    except ImportError:
        print("tiny_models: the `tokenizers` package is missing: pip install 'attnload[tokenizer]'", file=sys.stderr)
        return 2
    for folder, config in ((gqa, gqa_config()), (mla, mla_config())):
        per_token = kv_elements_per_token_per_layer(config) * LAYERS * 2  # bf16 bytes
        print(f"{folder}: {per_token / 1024:g} KiB of KV per token (bf16, {LAYERS} layers)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
