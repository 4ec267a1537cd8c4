"""Plain ``prompt_tokens`` profiles sized by a model's tokenizer, end to end.

A real ``attnload run`` against the recording server: every user message the server receives
must encode, with the model's own tokenizer.json, to exactly the profile's target minus the 4
tokens per message attnload charges, closed loop and open loop, unpaired and paired.
"""

from __future__ import annotations

import json
from pathlib import Path

from test_traffic_e2e import MODELS, received, run, start_recorder

from attnload.measure.tokens import text_tokens
from attnload.workload.tokenizer import LocalTokenizer
from helpers import Processes, write_config
from test_workload_tokenizer import word_level

TARGETS = {50: 46, 300: 296}
"""Profile ``prompt_tokens`` → content tokens of its user message (4 per message are the chat overhead)."""


def test_plain_prompts_are_sized_by_the_models_tokenizer(processes: Processes, tmp_path: Path) -> None:
    path = word_level(tmp_path)
    tok = LocalTokenizer(path)
    url, log = start_recorder(processes, tmp_path, chunk_delay_ms=0)
    config = write_config(
        tmp_path,
        url,
        MODELS,
        workload={
            "short": {"prompt_tokens": 50, "max_tokens": 4},
            "rag": {"prompt_tokens": 300, "max_tokens": 4, "shared_prefix_ratio": 0.5, "prefixes": 1},
        },
    )
    data = json.loads(config.read_text())
    data["models"]["gqa_model"]["tokenizer"] = str(path)  # the first model: it also sizes paired prompts
    config.write_text(json.dumps(data))

    run(processes, config, tmp_path / "closed", "--users", "2", "--duration", "2s", "--stop-timeout", "5")
    closed = received(log)
    by_model = {
        model: [e["body"]["messages"][0]["content"] for e in closed if e["body"]["model"] == model]
        for model in ("llama-3-70b", "deepseek-v3")
    }
    assert by_model["llama-3-70b"] and by_model["deepseek-v3"]
    assert {tok.count(c) for c in by_model["llama-3-70b"]} == set(TARGETS.values())
    assert {text_tokens(c) for c in by_model["deepseek-v3"]} == set(TARGETS.values())  # no tokenizer: estimator
    shared = {c[: c.index("[")] for c in by_model["llama-3-70b"] if tok.count(c) == TARGETS[300]}
    assert len(shared) == 1 and tok.count(shared.pop()) == 148  # one identical prefix, half of the content

    log.unlink()
    run(
        processes,
        config,
        tmp_path / "open",
        "--shape",
        "rate:6",
        "--stage-duration",
        "2s",
        "--paired",
        "--stop-timeout",
        "5",
    )
    paired = received(log)
    contents = {
        model: sorted(e["body"]["messages"][0]["content"] for e in paired if e["body"]["model"] == model)
        for model in ("llama-3-70b", "deepseek-v3")
    }
    assert len(contents["llama-3-70b"]) >= 6
    assert contents["llama-3-70b"] == contents["deepseek-v3"]  # paired: one text for both models
    assert {tok.count(c) for c in contents["llama-3-70b"]} <= set(TARGETS.values())
