"""``attnload report``: table + HTML for odd results files; bad files are one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnload.commands.cli import main
from attnload.results.model import Results
from helpers.results import failed_model, gqa_model, mla_model, results, zero_stage_model


def _write(tmp_path: Path, run: Results, name: str = "run.json") -> Path:
    path = tmp_path / name
    path.write_text(run.to_json())
    return path


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(results(gqa_model(), failed_model()), id="failed-model"),
        pytest.param(results(zero_stage_model()), id="zero-request-stage"),
        pytest.param(results(mla_model()), id="single-model"),
    ],
)
def test_report_writes_html_next_to_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], run: Results) -> None:
    path = _write(tmp_path, run)
    assert main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    assert run.models[0].key in out
    html = path.with_suffix(".html").read_text()
    assert html.startswith("<!doctype html>") and "</html>" in html
    assert f"HTML report: {path.with_suffix('.html')}" in out.replace("\n", "")


def test_report_html_flag_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    current = _write(tmp_path, results(gqa_model(), mla_model()))
    slower = gqa_model().model_copy(update={"ttft_s": gqa_model().ttft_s.model_copy(update={"p50": 0.5})})
    baseline_run = results(gqa_model(), mla_model())
    regressed = results(slower, mla_model())
    base = _write(tmp_path, baseline_run, "base.json")
    now = _write(tmp_path, regressed, "now.json")
    out_html = tmp_path / "out" / "r.html"
    assert main(["report", str(now), "--html", str(out_html), "--compare", str(base)]) == 0
    text = capsys.readouterr().out
    assert "regressions:" in text and "TTFT p50" in text
    assert 'id="compare-table"' in out_html.read_text()
    assert main(["report", str(current), "--compare", str(base)]) == 0
    assert "no regressions" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, expect",
    [
        ("{not json", "not valid JSON"),
        ('{"schema": "guidellm/v2"}', "schema is 'guidellm/v2'"),
        ('{"schema": "attnload.results/v1", "models": "x"}', "damaged or from another tool"),
        ("[1, 2]", "schema is 'list'"),
    ],
)
def test_bad_results_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expect: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expect in err and "Traceback" not in err
    assert not path.with_suffix(".html").exists()


def test_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope.json")]) == 2
    assert "not found" in capsys.readouterr().err


def test_unwritable_html_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, results(mla_model()))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["report", str(path), "--html", str(blocker / "r.html")]) == 2
    assert "cannot write the HTML report" in capsys.readouterr().err
