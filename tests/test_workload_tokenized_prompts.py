"""A model's tokenizer sizes plain ``prompt_tokens`` prompts exactly, shared prefixes included.

The truth is the tokenizer itself: every planned user message must encode to the profile's target
minus the 4 tokens per message the estimator also charges, so the prompt tokens attnload records
(content + 4) equal ``prompt_tokens`` exactly, as they do with the estimator against the simulator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from attnload.config.load import load_config
from attnload.measure.tokens import MESSAGE_OVERHEAD_TOKENS, text_tokens
from attnload.runner.sender.dialogs import Traffic
from attnload.workload.prompts import Workload
from attnload.workload.tokenizer import LocalTokenizer
from test_workload_tokenizer import byte_bpe, word_level


def config_with(tmp_path: Path, workload: dict[str, Any], tokenizer: Path | None = None) -> Path:
    models: dict[str, Any] = {
        "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA"},
        "mla_model": {"id": "deepseek-chat", "attention_type": "MLA"},
    }
    if tokenizer is not None:
        models["mla_model"]["tokenizer"] = str(tokenizer)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"base_url": "http://127.0.0.1:9/api", "models": models, "workload": workload}))
    return path


@pytest.mark.parametrize("make", [word_level, byte_bpe])
@pytest.mark.parametrize("target", [40, 41, 97, 300, 2048])
def test_user_content_has_exactly_the_target_tokens(tmp_path: Path, make: Any, target: int) -> None:
    tok = LocalTokenizer(make(tmp_path))
    workload = Workload(load_config(config_with(tmp_path, {"p": {"prompt_tokens": target, "max_tokens": 8}})))
    for _ in range(5):
        content = workload.next(tok).messages[0]["content"]
        assert content.startswith("[")  # the salt still leads
        assert tok.count(content) == target - MESSAGE_OVERHEAD_TOKENS


@pytest.mark.parametrize("make", [word_level, byte_bpe])
def test_distributions_and_a_profile_text_hit_each_draw(tmp_path: Path, make: Any) -> None:
    tok = LocalTokenizer(make(tmp_path))
    workload = Workload(
        load_config(
            config_with(
                tmp_path,
                {
                    "p": {
                        "prompt": "Summarise the following.",
                        "max_tokens": 8,
                        "prompt_tokens": {"dist": "uniform", "min": 40, "max": 400},
                    }
                },
            )
        )
    )
    drawn = Workload(
        load_config(
            config_with(
                tmp_path,
                {
                    "p": {
                        "prompt": "Summarise the following.",
                        "max_tokens": 8,
                        "prompt_tokens": {"dist": "uniform", "min": 40, "max": 400},
                    }
                },
            )
        )
    )
    for _ in range(20):
        content = workload.next(tok).messages[0]["content"]
        estimated = drawn.next().messages[0]["content"]  # same seed, same draw, estimator-sized
        assert "Summarise the following." in content
        assert tok.count(content) == text_tokens(estimated)  # the estimator's content tokens for that draw


@pytest.mark.parametrize("make", [word_level, byte_bpe])
def test_shared_prefix_is_identical_text_and_the_total_still_exact(tmp_path: Path, make: Any) -> None:
    tok = LocalTokenizer(make(tmp_path))
    workload = Workload(
        load_config(
            config_with(
                tmp_path, {"rag": {"prompt_tokens": 1000, "shared_prefix_ratio": 0.5, "prefixes": 2, "max_tokens": 8}}
            )
        )
    )
    texts = [workload.next(tok).messages[0]["content"] for _ in range(30)]
    assert all(tok.count(t) == 1000 - MESSAGE_OVERHEAD_TOKENS for t in texts)
    prefixes = {t[: t.index("[")] for t in texts}  # everything before the salt
    assert len(prefixes) == 2  # one of two fixed texts, identical across requests
    assert all(abs(tok.count(p) - 498) <= 1 for p in prefixes)  # half of the 996 content tokens
    assert len(set(texts)) == 30  # the salt and filler stay unique


def test_a_request_shorter_than_the_shared_prefix_cuts_it_and_stays_exact(tmp_path: Path) -> None:
    tok = LocalTokenizer(word_level(tmp_path))
    profile = {
        "rag": {
            "prompt_tokens": {"dist": "uniform", "min": 20, "max": 2000},
            "shared_prefix_ratio": 0.9,
            "prefixes": 1,
            "max_tokens": 8,
        }
    }
    workload = Workload(load_config(config_with(tmp_path, profile)))
    twin = Workload(load_config(config_with(tmp_path, profile)))  # same seed: tells each draw's target
    texts = [workload.next(tok).messages[0]["content"] for _ in range(40)]
    targets = [text_tokens(twin.next().messages[0]["content"]) for _ in range(40)]
    assert [tok.count(t) for t in texts] == targets
    heads = [t[: t.index("[")] for t in texts]
    longest = max(heads, key=len)
    assert tok.count(longest) == int(1006 * 0.9)  # the nominal (uniform mean 1010) shared share
    assert all(longest.startswith(head) for head in heads)  # a cut prefix is the same leading text
    assert any(len(head) < len(longest) for head in heads)  # some draws were shorter than the prefix


def test_traffic_sizes_with_the_models_tokenizer_only(tmp_path: Path) -> None:
    """Per model: the estimator for a model without one (None), its tokenizer otherwise; paired: the first."""
    path = word_level(tmp_path)
    config = load_config(config_with(tmp_path, {"p": {"prompt_tokens": 64, "max_tokens": 8}}, tokenizer=path))
    traffic = Traffic(config, Workload(config), lambda: (0, 1))
    assert traffic.sizer(["gqa_model"]) is None
    sizer = traffic.sizer(["mla_model"])
    assert isinstance(sizer, LocalTokenizer)
    assert traffic.sizer(["mla_model", "gqa_model"]) is sizer
    assert traffic.sizer(["gqa_model", "mla_model"]) is None
    plan = traffic.session(["mla_model"]).next().plans["mla_model"]
    assert sizer.count(plan.messages[0]["content"]) == 64 - MESSAGE_OVERHEAD_TOKENS
