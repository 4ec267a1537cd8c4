"""Opens generated HTML reports in headless chromium: plots drawn, tables equal the JSON, no errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from attnload.report import write_html
from attnload.results.model import Results
from helpers.results import failed_model, gqa_model, mla_model, results, zero_stage_model

pytestmark = pytest.mark.browser


def _json_value(obj: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) if obj is not None else None
    return obj


def _open(browser: Any, path: Path) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: problems.append(f"network: {r.url}") if not r.url.startswith("file:") else None)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, problems


def _check_tables(page: Any, data: dict[str, Any]) -> int:
    """Every numeric cell's data-value equals the JSON field it names; returns cells checked."""
    models = {m["key"]: m for m in data["models"]}
    cells = page.eval_on_selector_all(
        "table.summary td[data-field], table.stages td[data-field]",
        """tds => tds.map(td => ({model: td.closest('tr').dataset.model, stage: td.closest('tr').dataset.stage,
                                 field: td.dataset.field, value: td.dataset.value, text: td.textContent}))""",
    )
    for cell in cells:
        source = models[cell["model"]]
        if cell["stage"] is not None:
            source = source["stages"][int(cell["stage"])]
        expected = _json_value(source, cell["field"])
        if expected is None:
            assert cell["value"] == "" and cell["text"] == "—", cell
        else:
            assert float(cell["value"]) == pytest.approx(expected, rel=0, abs=0), cell
    return len(cells)


def test_report_renders_plots_and_matches_json(browser: Any, tmp_path: Path) -> None:
    run = results(gqa_model(), mla_model(), failed_model(), zero_stage_model(), saturated=True)
    json_path = tmp_path / "run.json"
    json_path.write_text(run.to_json())
    html_path = write_html(run, tmp_path / "run.html", compare=results(gqa_model(), mla_model()))
    page, problems = _open(browser, html_path)

    plots = page.eval_on_selector_all(
        "svg.plot",
        "svgs => svgs.map(s => [s.id, s.querySelectorAll('.datum').length, "
        "s.querySelectorAll('path.series-line').length])",
    )
    ids = {p[0] for p in plots}
    assert {
        "plot-throughput",
        "plot-frontier-ttft-p99",
        "plot-ttft-percentiles",
        "plot-itl-percentiles",
        "plot-errors",
    } <= ids
    for plot_id, points, _paths in plots:
        assert points > 0, f"{plot_id} drew no data"
    assert all(paths > 0 for plot_id, _, paths in plots if plot_id != "plot-errors")

    data = json.loads(json_path.read_text())
    assert _check_tables(page, data) > 50
    assert page.locator("#saturation").is_visible()
    assert "hit its KV capacity" in page.locator("#attention").inner_text()
    assert page.locator("#compare-table tbody tr").count() > 0
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert problems == []


@pytest.mark.parametrize("name", ["single", "failed-only"])
def test_edge_reports_render_without_errors(browser: Any, tmp_path: Path, name: str) -> None:
    run: Results = results(mla_model()) if name == "single" else results(failed_model())
    html_path = write_html(run, tmp_path / f"{name}.html")
    page, problems = _open(browser, html_path)
    assert _check_tables(page, json.loads(run.to_json())) > 0
    page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
    assert problems == []
