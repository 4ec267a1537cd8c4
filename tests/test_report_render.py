"""Console table, HTML and the attention explanation, from factory-built Results."""

from __future__ import annotations

from rich.console import Console

from attnload.report import compare_results, print_summary, render_html
from attnload.report.explain import MIXED_MODELS_NOTE, explain
from attnload.results.model import Results
from helpers.results import (
    GQA_INFO,
    failed_model,
    gqa_model,
    mla_model,
    model,
    pair,
    results,
    stage,
    zero_stage_model,
)


def _console_text(run: Results) -> str:
    console = Console(width=200, record=True, color_system=None)
    print_summary(run, console)
    return console.export_text()


def test_console_table_medians_first_with_attention_columns() -> None:
    text = _console_text(pair())
    header = text[text.index("TTFT") :]
    assert header.index("p50") < header.index("p99")
    assert "KV B/token" in text and "40,960" in text and "5.40 M" in text
    assert "256 users" in text and MIXED_MODELS_NOTE in text


def test_console_handles_failed_zero_stage_and_saturation() -> None:
    text = _console_text(results(failed_model(), zero_stage_model(), saturated=True))
    assert "auth" in text and "0 / 0" in text and "client saturated" in text
    assert MIXED_MODELS_NOTE not in text  # no presets known: no claim about them


def test_explanation_names_the_model_that_hit_kv_capacity() -> None:
    text = " ".join(explain(pair()))
    assert "320 KiB" in text and "68.6 KiB" in text and "4.7×" in text
    assert "llama-3-70b hit its KV capacity first" in text
    assert "DP attention" in text and "simulator" in text


def test_explanation_without_knee_says_so() -> None:
    flat = model("a", "gqa", [stage(0, 1, 0.05, 0.01, 90.0), stage(1, 8, 0.06, 0.01, 600.0)], GQA_INFO)
    assert any("stayed below every model's KV capacity" in p for p in explain(results(flat)))


def test_html_is_self_contained_and_complete() -> None:
    html = render_html(results(gqa_model(), mla_model(), failed_model(), zero_stage_model()))
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html and "<script" not in html
    for section in ("summary", "attention", "plots", "stages", "run"):
        assert f'<section id="{section}">' in html
    for plot in ("plot-throughput", "plot-frontier-ttft-p99", "plot-ttft-percentiles", "plot-errors"):
        assert f'id="{plot}"' in html
    assert 'class="failed-model"' in html and 'class="empty-stage"' in html


def test_html_single_model_without_stages() -> None:
    model = mla_model().model_copy(update={"stages": []})
    html = render_html(results(model))
    assert "single stage" in html and "No completed requests to plot" in html


def test_compare_flags_latency_up_and_throughput_down() -> None:
    base = pair()
    worse_gqa = gqa_model().model_copy(
        update={
            "ttft_s": gqa_model().ttft_s.model_copy(update={"p99": gqa_model().ttft_s.p99 * 1.2}),
            "output_tokens_per_s": gqa_model().output_tokens_per_s * 0.8,
        }
    )
    cmp = compare_results(results(worse_gqa, mla_model()), base)
    assert cmp.regressions == ["llama-3-70b: TTFT p99, out tok/s"]
    assert compare_results(base, base).regressions == []


def test_compare_pairs_stages_by_load_and_lists_unmatched_models() -> None:
    cmp = compare_results(results(gqa_model(), zero_stage_model()), pair())
    assert cmp.only_current == ["qwen2.5-72b"] and cmp.only_baseline == ["deepseek-v3"]
    assert [r.stage for r in cmp.rows] == [None, "1 user", "8 users", "64 users", "256 users"]


def test_compare_failed_model_is_a_regression() -> None:
    broken = failed_model().model_copy(update={"key": "llama-3-70b"})
    cmp = compare_results(results(broken), results(gqa_model()))
    assert "failure ratio" in cmp.rows[0].regressions and "TTFT p50" in cmp.rows[0].regressions
