"""Workload profiles: distributions, long-context prompts to a token target, shared prefixes, mixes."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from attnload.commands.seedscript import format_lines, seed_profiles
from attnload.config.load import load_config
from attnload.config.model import Distribution
from attnload.errors import UsageError
from attnload.measure.tokens import prompt_tokens
from attnload.workload.prompts import Workload

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def config_with(tmp_path: Path, workload: dict[str, Any], **extra: Any) -> Path:
    data = {
        "base_url": "http://127.0.0.1:9/api",
        "models": {
            "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA"},
            "mla_model": {"id": "deepseek-chat", "attention_type": "MLA"},
        },
        "workload": workload,
        **extra,
    }
    path = tmp_path / "c.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("target", [1024, 8192, 32768])
def test_long_context_profiles_hit_the_token_target(tmp_path: Path, target: int) -> None:
    config = load_config(config_with(tmp_path, {f"long-{target}": {"prompt_tokens": target, "max_tokens": 64}}))
    workload = Workload(config)
    for _ in range(5):
        plan = workload.next()
        assert prompt_tokens(plan.messages) == target  # the sim's usage uses this same estimator
        assert plan.max_tokens == 64


def test_distributions_sample_within_bounds_and_near_their_mean() -> None:
    rng = random.Random(0)
    normal = Distribution(dist="normal", mean=500, stddev=100, min=100, max=900)
    lognormal = Distribution(dist="lognormal", mean=800, stddev=400, min=16, max=100_000)
    uniform = Distribution(dist="uniform", min=10, max=20)
    fixed = Distribution(dist="fixed", value=42)
    for dist, mean, tolerance in ((normal, 500, 10), (lognormal, 800, 30), (uniform, 15, 0.3), (fixed, 42, 0)):
        draws = [dist.sample(rng) for _ in range(4000)]
        assert min(draws) >= dist.min and max(draws) <= dist.max
        assert abs(statistics.mean(draws) - mean) <= tolerance, (dist.dist, statistics.mean(draws))
    assert {uniform.sample(rng) for _ in range(500)} == set(range(10, 21))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"dist": "uniform", "min": 50, "max": 10}, "min 50 > max 10"),
        ({"dist": "normal", "mean": 100}, "needs stddev"),
        ({"dist": "uniform", "min": 5}, "needs min and max"),
        ({"dist": "zipf", "mean": 3}, "dist"),
    ],
)
def test_bad_distributions_are_one_line_errors(tmp_path: Path, raw: dict[str, Any], message: str) -> None:
    path = config_with(tmp_path, {"p": {"prompt_tokens": raw}})
    with pytest.raises(UsageError) as error:
        load_config(path)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert str(path) in str(error.value)


def test_profile_draws_and_mix_weights(tmp_path: Path) -> None:
    config = load_config(
        config_with(
            tmp_path,
            {
                "chat": {
                    "prompt_tokens": {"dist": "lognormal", "mean": 600, "stddev": 300, "min": 64, "max": 4096},
                    "max_tokens": {"dist": "uniform", "min": 32, "max": 128},
                    "weight": 3,
                },
                "long": {"prompt_tokens": 8192, "max_tokens": 16, "ignore_eos": True, "weight": 1},
            },
            seed=7,
        )
    )
    workload = Workload(config)
    plans = [workload.next() for _ in range(800)]
    chat = [p for p in plans if p.profile == "chat"]
    assert 0.70 < len(chat) / len(plans) < 0.80  # weights 3:1
    assert all(32 <= p.max_tokens <= 128 and not p.ignore_eos for p in chat)
    assert len({prompt_tokens(p.messages) for p in chat}) > 50  # a distribution, not one length
    assert all(64 <= prompt_tokens(p.messages) <= 4096 for p in chat)
    assert all(p.ignore_eos and p.max_tokens == 16 for p in plans if p.profile == "long")
    again = Workload(config)  # seeded: the same sequence of profiles and lengths
    assert [(p.profile, p.max_tokens) for p in plans[:50]] == [
        (p.profile, p.max_tokens) for p in (again.next() for _ in range(50))
    ]


def test_shared_prefix_comes_before_the_salt(tmp_path: Path) -> None:
    config = load_config(
        config_with(tmp_path, {"rag": {"prompt_tokens": 1000, "shared_prefix_ratio": 0.5, "prefixes": 2}})
    )
    workload = Workload(config)
    texts = [workload.next().messages[0]["content"] for _ in range(40)]
    heads = {t[:1500] for t in texts}
    assert len(heads) == 2  # two distinct shared prefixes of ~1/2 the prompt
    assert len({t for t in texts}) == 40  # the rest is unique (salt after the prefix)
    unique = Workload(load_config(config_with(tmp_path, {"u": {"prompt_tokens": 1000}})))
    assert len({unique.next().messages[0]["content"][:40] for _ in range(40)}) == 40  # salt first


def test_shared_prefix_needs_prompt_tokens(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="shared_prefix_ratio needs prompt_tokens"):
        load_config(config_with(tmp_path, {"x": {"prompt": "hi", "shared_prefix_ratio": 0.5}}))


def test_unknown_profile_is_a_usage_error(tmp_path: Path) -> None:
    config = load_config(config_with(tmp_path, {"p": {"prompt_tokens": 100}}))
    with pytest.raises(UsageError, match="unknown profile 'nosuch'"):
        Workload(config, ["nosuch"])


def test_seed_profiles_and_printout_match_the_seed_script() -> None:
    config = load_config(EXAMPLES / "benchmark_config.json")
    assert seed_profiles(config) == ["short", "long"]
    row = {"model": "llama-3-70b", "elapsed_sec": 1.234, "completion_tokens": 98, "tokens_per_sec": 79.4, "samples": []}
    table = {"gqa_model": {"short": row}, "mla_model": {"short": {**row, "model": "deepseek-chat"}}}
    lines = format_lines(config, table)
    assert lines[0] == "--- gqa_model (llama-3-70b) ---"
    # the seed prints `print("short:", measure_latency(...))`, a dict repr
    assert lines[1] == (
        "short: {'model': 'llama-3-70b', 'elapsed_sec': 1.234, 'completion_tokens': 98, 'tokens_per_sec': 79.4}"
    )
    assert lines[2] == "--- mla_model (deepseek-chat) ---"


def test_goodput_equals_a_hand_count_of_records(tmp_path: Path) -> None:
    """Raw records through the runtime's SLO check and recorder: goodput × window is the hand count."""
    from attnload.measure.recorder import RequestRecord
    from attnload.plan.options import RunOptions
    from attnload.runner.runtime import Runtime
    from attnload.workload.shapes import parse_shape

    path = config_with(
        tmp_path, {"p": {"prompt_tokens": 100}}, slo={"ttft_p99_s": 0.2, "itl_p99_s": 0.03, "e2e_p99_s": 2.0}
    )
    runtime = Runtime.local(load_config(path), RunOptions(str(path), shape=parse_shape("concurrency:4", 10.0)))
    sender, collector = runtime.sender, runtime.collector
    assert sender is not None and collector is not None
    runtime.begin_test()
    runtime.enter_stage(0, users=4, rate=None)
    rng = random.Random(11)
    hand = {"gqa_model": 0, "mla_model": 0}
    for i in range(400):
        key = "gqa_model" if i % 2 else "mla_model"
        ttft, e2e = rng.uniform(0.05, 0.3), rng.uniform(0.5, 2.5)
        gaps = tuple((rng.uniform(0.005, 0.0315), 1) for _ in range(50))
        outcome = "failed" if i % 17 == 0 else "ok"
        good = outcome == "ok" and sender.is_good(ttft, gaps, e2e)
        ordered = sorted(g for g, _ in gaps)
        by_hand = outcome == "ok" and ttft <= 0.2 and e2e <= 2.0 and ordered[math.ceil(0.99 * 50) - 1] <= 0.03
        assert good == by_hand
        hand[key] += by_hand
        sender.observe(
            RequestRecord(
                model_key=key,
                profile="p",
                stage=0,
                outcome=outcome,
                error=None,
                ttft_s=ttft,
                itl_samples=gaps,
                e2e_s=e2e,
                prompt_tokens=100,
                completion_tokens=51,
                cached_prompt_tokens=0,
                tokens_estimated=False,
                good=good,
            )
        )
    runtime.test_stopped()
    results = collector.results()
    for key, count in hand.items():
        stage = results.model(key).stages[0]
        assert count > 0 and round(stage.goodput_rps * (stage.end_s - stage.start_s)) == count  # type: ignore[operator]
