"""The pair of real vLLM servers (CPU build, tiny GQA and MLA models) that the ``vllm`` tests share.

A cold CPU server takes ~30 s to a minute on 2 cores, so one pair serves every test that needs no flags of its
own (``vllm_pair`` in tests/e2e/conftest.py):
- ``tiny-gqa``: prefix caching with ``--block-size 32`` and ``--enable-prompt-tokens-details``;
- ``tiny-mla``: the CPU MLA backend (block 16, no prefix cache), started *without*
  ``--enable-prompt-tokens-details``, so vLLM sends no ``prompt_tokens_details`` at all;
- both with the same 8 MiB KV budget: 480 GQA tokens (16 KiB each) against 1,808 MLA tokens.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from attnload.engines import tiny_models
from attnload.engines.vllm import ServerSpec, running
from helpers import free_port

KV_BYTES = 8 * 2**20
MAX_MODEL_LEN = 448
"""8 MiB hold 16 GQA blocks of 32 tokens, one of them vLLM's null block: 480 tokens, so 448 fits."""


@dataclass(frozen=True)
class Pair:
    gqa: ServerSpec
    mla: ServerSpec
    models: Path


@contextmanager
def serving_pair(root: Path) -> Iterator[Pair]:
    tiny_models.write_pair(root / "models")
    gqa = ServerSpec(
        root / "models" / tiny_models.GQA_NAME,
        tiny_models.GQA_NAME,
        free_port(),
        core=0,
        kv_cache_bytes=KV_BYTES,
        max_model_len=MAX_MODEL_LEN,
        block_size=32,
        max_num_seqs=16,
    )
    mla = ServerSpec(
        root / "models" / tiny_models.MLA_NAME,
        tiny_models.MLA_NAME,
        free_port(),
        core=1,
        kv_cache_bytes=KV_BYTES,
        max_model_len=MAX_MODEL_LEN,
        max_num_seqs=16,
        prompt_tokens_details=False,
    )
    with running([gqa, mla], root / "logs"):
        yield Pair(gqa, mla, root / "models")
