"""A context ladder's HTML report in headless chromium: the verdict opens the page, the decode-speed-vs-context
chart draws one line per model at its ``context_scaling`` points, and a grid's SLO cells render."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from attnload.config.model import Slo
from attnload.report import write_html
from attnload.results.ladder import context_scaling
from attnload.results.model import ModelSummary, Results, StageSummary, Summary, Verdict, VerdictModel
from helpers.results import GQA_INFO, MLA_INFO

pytestmark = pytest.mark.browser

GRID = [(1024, 1, 0.0046), (1024, 4, 0.0047), (32768, 1, 0.0049), (32768, 4, 0.0060)]


def _stage(index: int, context: int, users: int, tpot_s: float) -> StageSummary:
    return StageSummary(
        index=index,
        context=context,
        users=users,
        tpot_s=Summary(count=10, p50=tpot_s, p99=tpot_s * 1.2),
        itl_s=Summary(count=100, p50=tpot_s, p99=tpot_s * 2),
        ttft_s=Summary(count=10, p50=0.05, p99=0.08),
        requests={"ok": 10},  # type: ignore[arg-type]
        output_tokens_per_s=200.0 * users,
        prompt_tokens_p50=float(context),
        decode_tokens_per_s_per_user=1 / tpot_s,
    )


def _model(key: str, attention: str, info: dict[str, Any], scale: float) -> ModelSummary:
    stages = [_stage(i, c, u, t * scale) for i, (c, u, t) in enumerate(GRID)]
    return ModelSummary(
        key=key,
        model=key,
        attention=attention,
        attention_info=info,
        stages=stages,
        context_scaling=context_scaling(stages),
    )


def test_the_ladder_report_opens_with_the_verdict_and_plots_decode_vs_context(browser: Any, tmp_path: Path) -> None:
    models = [_model("gqa_model", "GQA", GQA_INFO, 1.0), _model("mla_model", "MLA", MLA_INFO, 1.4)]
    slo = Slo(ttft_p99_s=0.5, itl_p99_s=0.0135)  # ITL p99 = 2 × TPOT: MLA misses it at 32K
    run = Results(
        started_at="2026-01-01T00:00:00Z",
        ended_at="2026-01-01T00:01:00Z",
        duration_s=60.0,
        config_sha256="x",
        config={"slo": slo.model_dump()},
        models=models,
        verdict=Verdict(text="From 1K to 32K tokens of context …", models=[VerdictModel(target="gqa_model")]),
    )
    path = write_html(run, tmp_path / "ladder.html")
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    first = page.eval_on_selector("main section", "s => s.id")
    assert first == "verdict" and page.locator("#verdict-text").is_visible()
    points = page.eval_on_selector_all(
        "#plot-decode-context .datum", "ds => ds.map(d => [d.dataset.series, Number(d.dataset.x), Number(d.dataset.y)])"
    )
    expected = {
        (f"{m.key} ({m.attention}), {p.users} users", float(p.context)) for m in models for p in m.context_scaling
    }
    assert {(s, x) for s, x, _ in points} == expected, points
    for series, x, y in points:
        model = next(m for m in models if series.startswith(m.key))
        users = int(series.rsplit(", ", 1)[1].split()[0])
        truth = next(p for p in model.context_scaling if p.context == x and p.users == users)
        assert y == pytest.approx(truth.decode_tokens_per_s_per_user, rel=1e-3)
    assert page.locator("table.slo-grid").count() == 2
    assert page.locator("td.slo-missed").count() == 2 and page.locator("td.slo-met").count() == 6
    assert problems == []
