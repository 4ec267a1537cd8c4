"""The context ladder and the verdict as pure functions: the shape, the rung's prompts and pinned output, the
max_context refusal, context_scaling, the pair sentence, and the verdict's capacity and cost arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnload.config.load import load_config
from attnload.config.model import Slo
from attnload.config.model import TestConfig as Config
from attnload.errors import UsageError
from attnload.measure.tokens import prompt_tokens as estimate_prompt_tokens
from attnload.results.ladder import context_scaling, pair_sentence
from attnload.results.model import ModelSummary, StageSummary, Summary
from attnload.results.verdict import best_stage, build_verdict, meets_slo
from attnload.workload.ladder import check_ladder
from attnload.workload.prompts import Workload
from attnload.workload.shapes import ContextSpec, parse_shape
from helpers.results import GQA_INFO, MLA_INFO


def _config(tmp_path: Path, models: dict[str, dict[str, object]] | None = None, **extra: object) -> Config:
    data = {
        "base_url": "http://127.0.0.1:9",
        "models": models
        or {
            "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA", "max_context": 65536},
            "mla_model": {"id": "deepseek-chat", "attention_type": "MLA", "max_context": 65536},
        },
        "request": {"max_tokens": 256},
        "workload": {"w": {"prompt_tokens": 100, "max_tokens": 256}},
        **extra,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return load_config(path)


# ---------------------------------------------------------------------------- the shape


def test_context_shape_parses_k_suffixes_and_runs_every_pair_of_a_grid() -> None:
    spec = parse_shape("context:1k,32K,1500", 15.0)
    assert isinstance(spec, ContextSpec) and spec.contexts == (1024, 32768, 1500)
    assert [(s.context, s.users) for s in spec.stages] == [(1024, 8), (32768, 8), (1500, 8)]
    grid = spec.with_users((1, 8))
    assert [(s.index, s.context, s.users, s.start_s) for s in grid.stages] == [
        (0, 1024, 1, 0.0),
        (1, 1024, 8, 15.0),
        (2, 32768, 1, 30.0),
        (3, 32768, 8, 45.0),
        (4, 1500, 1, 60.0),
        (5, 1500, 8, 75.0),
    ]
    assert grid.duration_s == 90.0 and grid.peak_users == 8
    assert parse_shape(grid.to_text(), 15.0) == grid  # how every Locust process reads it back


@pytest.mark.parametrize(
    "text", ["context:", "context:0", "context:1.3k", "context:abc", "context:-1k", "context:1k;users:0"]
)
def test_bad_ladders_are_one_line_usage_errors(text: str) -> None:
    with pytest.raises(UsageError) as error:
        parse_shape(text, 10.0)
    assert "\n" not in str(error.value)


# ---------------------------------------------------------------------------- the rung's requests


def test_a_rung_sizes_every_prompt_and_pins_the_output(tmp_path: Path) -> None:
    config = _config(
        tmp_path, workload={"w": {"prompt_tokens": 100, "max_tokens": {"dist": "uniform", "min": 10, "max": 30}}}
    )
    workload = Workload(config)
    workload.context = 4096
    plans = [workload.next() for _ in range(5)]
    assert {estimate_prompt_tokens(p.messages) for p in plans} == {4096}
    assert {(p.max_tokens, p.ignore_eos) for p in plans} == {(20, True)}  # the distribution's nominal value
    assert len({p.messages[0]["content"] for p in plans}) == 5  # the salt keeps prompts unique
    workload.context = None
    assert estimate_prompt_tokens(workload.next().messages) == 100


def test_a_shared_prefix_profile_keeps_its_prefix_inside_a_rung(tmp_path: Path) -> None:
    config = _config(tmp_path, workload={"w": {"prompt_tokens": 100, "shared_prefix_ratio": 0.5, "max_tokens": 8}})
    workload = Workload(config)
    workload.context = 2048
    a, b = (workload.next().messages[0]["content"] for _ in range(2))
    assert estimate_prompt_tokens([{"role": "user", "content": a}]) == 2048
    assert a[:3000] == b[:3000] and a != b  # about half of 2048 tokens shared, then the salt


def test_a_rung_over_a_models_max_context_is_refused(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        models={
            "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA", "max_context": 8192},
            "mla_model": {"id": "deepseek-chat", "attention_type": "MLA"},
        },
    )
    check_ladder(config, [1024, 7936])  # 7936 + 256 = 8192 fits exactly
    with pytest.raises(UsageError) as error:
        check_ladder(config, [1024, 8192])
    text = str(error.value)
    assert "gqa_model" in text and "max_context 8,192" in text and "8,448" in text and "\n" not in text


# ---------------------------------------------------------------------------- context_scaling and the sentence


def _stage(
    index: int, context: int | None, users: int, tpot_s: float, ttft_s: float = 0.05, **kw: object
) -> StageSummary:
    fields: dict[str, object] = {
        "index": index,
        "context": context,
        "users": users,
        "tpot_s": Summary(count=10, p50=tpot_s, p99=tpot_s * 1.2),
        "itl_s": Summary(count=100, p50=tpot_s, p99=tpot_s * 2),
        "ttft_s": Summary(count=10, p50=ttft_s, p99=ttft_s * 1.5),
        "e2e_s": Summary(count=10, p50=1.0, p99=1.5),
        "requests": {"ok": 10},
        "output_tokens_per_s": 1000.0,
        "prompt_tokens": 10_240,
        "completion_tokens": 2560,
    }
    fields.update(kw)
    return StageSummary.model_validate(fields)


def _model(key: str, attention: str, info: dict[str, float | int | str], stages: list[StageSummary]) -> ModelSummary:
    return ModelSummary(
        key=key,
        model=key,
        attention=attention,
        attention_info=info,
        stages=stages,
        context_scaling=context_scaling(stages),
    )


def test_context_scaling_is_each_rung_over_the_shortest_at_the_same_users() -> None:
    stages = [
        _stage(0, 1024, 1, 0.004),
        _stage(1, 1024, 8, 0.008),
        _stage(2, 16384, 1, 0.005),
        _stage(3, 16384, 8, 0.016),
    ]
    points = context_scaling(stages)
    assert [(p.context, p.users, round(p.relative or 0, 6)) for p in points] == [
        (1024, 1, 1.0),
        (16384, 1, 0.8),
        (1024, 8, 1.0),
        (16384, 8, 0.5),
    ]
    assert context_scaling([_stage(0, None, 4, 0.004)]) == []  # not a ladder


def test_the_pair_sentence_follows_the_numbers_not_the_textbook() -> None:
    gqa = _model("gqa_model", "GQA", GQA_INFO, [_stage(0, 1024, 1, 0.00462), _stage(1, 32768, 1, 0.00472)])
    mla = _model("mla_model", "MLA", MLA_INFO, [_stage(0, 1024, 1, 0.00674), _stage(1, 32768, 1, 0.00759, 6.0)])
    text = pair_sentence(gqa, mla) or ""
    assert text.startswith("From 1K to 32K tokens of context at 1 user per model")
    assert "gqa_model (GQA)'s per-user decode speed fell 2%" in text and "mla_model (MLA)'s fell 11%" in text
    assert "gqa_model keeps 4.7× more KV bytes per token, yet mla_model's decode fell more" in text
    assert "mla_model's TTFT p50 is 6.00 s" in text  # decode and prefill apart
    gqa4 = _model("gqa_model", "GQA", GQA_INFO, [_stage(0, 1024, 4, 0.004), _stage(1, 32768, 4, 0.005)])
    mla4 = _model("mla_model", "MLA", MLA_INFO, [_stage(0, 1024, 4, 0.006), _stage(1, 32768, 4, 0.0066)])
    text4 = pair_sentence(gqa4, mla4) or ""
    assert "fell 20%" in text4 and "fell 9%" in text4 and "yet" not in text4  # the expectation held


# ---------------------------------------------------------------------------- the verdict


SLO = Slo(ttft_p99_s=0.5, itl_p99_s=0.05)


def test_meets_slo_needs_every_p99_within_and_no_failure() -> None:
    assert meets_slo(_stage(0, None, 8, 0.01), SLO)
    assert not meets_slo(_stage(0, None, 8, 0.03), SLO)  # ITL p99 60 ms
    assert not meets_slo(_stage(0, None, 8, 0.01, ttft_s=0.4), SLO)  # TTFT p99 600 ms
    assert not meets_slo(_stage(0, None, 8, 0.01, requests={"ok": 10, "failed": 1}), SLO)


def test_the_verdict_takes_the_largest_stage_that_met_the_slo_and_prices_it_exactly(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        models={
            "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA", "gpus": 8, "gpu_hour_usd": 3.5},
            "mla_model": {
                "id": "deepseek-chat",
                "attention_type": "MLA",
                "price_per_mtok": {"input": 0.5, "output": 2.0},
            },
        },
        slo={"ttft_p99_s": 0.5, "itl_p99_s": 0.05},
    )
    gqa_stages = [
        _stage(0, 1024, 1, 0.005, output_tokens_per_s=200.0),
        _stage(1, 1024, 8, 0.010, output_tokens_per_s=1500.0),
        _stage(2, 1024, 32, 0.040, output_tokens_per_s=4000.0),  # ITL p99 80 ms: over the SLO
        _stage(3, 16384, 1, 0.006, output_tokens_per_s=180.0),
        _stage(4, 16384, 8, 0.012, output_tokens_per_s=1400.0, requests={"ok": 9, "failed": 1}),  # a failure
        _stage(5, 16384, 32, 0.050, output_tokens_per_s=3000.0),
    ]
    mla_stages = [
        _stage(i, c, u, 0.008, output_tokens_per_s=100.0 * u)
        for i, (c, u) in enumerate([(1024, 1), (1024, 8), (16384, 8)])
    ]
    models = [
        _model("gqa_model", "GQA", GQA_INFO, gqa_stages),
        _model("mla_model", "MLA", MLA_INFO, mla_stages),
    ]
    assert best_stage(models[0], config.slo) is gqa_stages[1]
    verdict = build_verdict(config, models)
    gqa, mla = verdict.models
    assert (gqa.target, gqa.context, gqa.slo_met_users, gqa.gpus) == ("gqa_model", 1024, 8, 8)
    assert gqa.users_per_gpu == 1.0 and gqa.output_tokens_per_s_per_gpu == 1500.0 / 8
    # price ÷ output tokens per hour: 8 GPUs × $3.50 = $28/h over 1500 × 3600 = 5.4 M tokens/h
    assert gqa.usd_per_mtok_output == pytest.approx(28.0 / 5.4, rel=1e-12)
    # an API: $2 per M output + $0.5 per M input × 4 input tokens per output token (10,240 / 2,560)
    assert (mla.slo_met_users, mla.context, mla.gpus) == (8, 16384, 8)  # a tie goes to the longer context
    assert mla.usd_per_mtok_output == pytest.approx(2.0 + 0.5 * 4.0, rel=1e-12)
    assert "At the SLO (TTFT p99 ≤ 500 ms, ITL p99 ≤ 50 ms): gqa_model held 8 users at 1K context" in verdict.text
    assert "$5.19 per million output tokens" in verdict.text


def test_the_verdict_says_what_is_missing(tmp_path: Path) -> None:
    config = _config(tmp_path)
    one = [
        _model("gqa_model", "GQA", {}, [_stage(0, 1024, 1, 0.005)]),
        _model("mla_model", "MLA", {}, [_stage(0, 1024, 1, 0.007)]),
    ]
    verdict = build_verdict(config, one)
    assert "one context only" in verdict.text and "no slo in the config" in verdict.text and "no price" in verdict.text
    assert [(v.slo_met_users, v.gpus) for v in verdict.models] == [(None, None), (None, None)]
    failing = build_verdict(
        _config(tmp_path, slo={"ttft_p99_s": 0.5}),
        [_model("gqa_model", "GQA", {}, [_stage(0, None, 4, 0.005, requests={"ok": 3, "failed": 2})])],
    )
    assert "gqa_model met the SLO in no stage (2 failed requests" in failing.text


# ---------------------------------------------------------------------------- the HTML report and the console


def test_the_report_opens_with_the_verdict_and_draws_decode_vs_context(tmp_path: Path) -> None:
    from rich.console import Console

    from attnload.report.console import render_table
    from attnload.report.html import render_html
    from attnload.results.model import Results

    config = _config(tmp_path, slo={"ttft_p99_s": 0.5, "itl_p99_s": 0.05})
    grid = [(1024, 1, 0.005), (1024, 8, 0.010), (16384, 1, 0.006), (16384, 8, 0.040)]
    models = [
        _model("gqa_model", "GQA", GQA_INFO, [_stage(i, c, u, t) for i, (c, u, t) in enumerate(grid)]),
        _model("mla_model", "MLA", MLA_INFO, [_stage(i, c, u, t * 1.2) for i, (c, u, t) in enumerate(grid)]),
    ]
    results = Results(
        started_at="2026-01-01T00:00:00Z",
        ended_at="2026-01-01T00:01:00Z",
        duration_s=60.0,
        config_sha256="x",
        config={"slo": config.slo.model_dump()},
        models=models,
        verdict=build_verdict(config, models),
    )
    html = render_html(results)
    assert html.index('<section id="verdict">') < html.index('<section id="summary">')
    assert "plot-decode-context" in html and html.index("plot-decode-context") < html.index("plot-throughput")
    assert html.count('class="slo-grid"') == 2
    assert html.count('class="slo-met"') == 6 and html.count('class="slo-missed"') == 2  # 16K × 8 users: ITL p99 over
    console = Console(width=160, record=True)
    console.print(render_table(results))
    text = console.export_text()
    assert text.lstrip().startswith("verdict\n") and text.index("verdict") < text.index("attnload results")
    assert "context ladder" in text


def test_without_preset_kv_facts_the_attention_types_set_the_expectation() -> None:
    """Real servers (the tiny vLLM pair) match no simulator preset: GQA vs MLA still says whose KV is larger."""
    gqa = _model("gqa_model", "GQA", {}, [_stage(0, 256, 1, 0.0196), _stage(1, 2048, 1, 0.0217, 1.94)])
    mla = _model("mla_model", "MLA", {}, [_stage(0, 256, 1, 0.0161), _stage(1, 2048, 1, 0.0189, 3.73)])
    text = pair_sentence(gqa, mla) or ""
    assert "gqa_model (GQA) keeps more KV bytes per token than a latent cache, yet mla_model's decode fell more" in text
    assert "no server view was read" in text and "mla_model's TTFT p50 is 3.73 s" in text
    same = _model("other", "GQA", {}, [_stage(0, 256, 1, 0.01), _stage(1, 2048, 1, 0.011)])
    assert "KV" not in (pair_sentence(gqa, same) or "")
