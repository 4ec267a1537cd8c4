"""Prompt sizes calibrated from the server's usage (``workload.calibration``), without processes.

Truth is a made-up tokenizer: ``server = slope × estimated + fixed`` tokens per whole prompt. A ratio
learned at one size must land that size exactly; a line (once sizes differ) must land any other size,
where a bare ratio misses by the fixed part; outliers and a flood of answers change nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnload.config.load import load_config
from attnload.measure.recorder import Series
from attnload.measure.tokens import MESSAGE_OVERHEAD_TOKENS, prompt_tokens, text_tokens
from attnload.results.summarize import prompt_sizes
from attnload.runner.sender.dialogs import Traffic
from attnload.workload.calibration import CALIBRATION_RESPONSES, CalibratedTokens, PromptCalibration
from attnload.workload.prompts import Workload
from test_workload_tokenized_prompts import config_with
from test_workload_tokenizer import word_level


def server(estimated: int, slope: float, fixed: int = 0) -> int:
    return round(slope * estimated + fixed)


def test_nothing_changes_until_enough_answers() -> None:
    calibration = PromptCalibration()
    for _ in range(CALIBRATION_RESPONSES - 1):
        calibration.observe(1024, 1382)
        assert not calibration.ready and calibration.scale(1024) == 1024
    calibration.observe(1024, 1382)
    assert calibration.ready and calibration.ratio == pytest.approx(1382 / 1024)
    assert server(calibration.scale(1024), 1.35) == pytest.approx(1024, abs=1)


def test_a_fixed_part_is_learned_apart_once_sizes_differ() -> None:
    """Template overhead of 60 tokens: the whole-prompt ratio lands 1024 within 5 %, then the line lands 8K."""
    calibration = PromptCalibration()
    for _ in range(CALIBRATION_RESPONSES):
        calibration.observe(1024, server(1024, 1.2, 60))
    ratio_only = calibration.scale(8192)
    asked = calibration.scale(1024)
    assert abs(server(asked, 1.2, 60) - 1024) <= 0.05 * 1024
    assert abs(server(ratio_only, 1.2, 60) - 8192) > 0.03 * 8192  # a bare ratio misses a far size
    for _ in range(CALIBRATION_RESPONSES):
        calibration.observe(asked, server(asked, 1.2, 60))  # what the calibrated prompts then report
    assert server(calibration.scale(1024), 1.2, 60) == pytest.approx(1024, abs=1)
    assert server(calibration.scale(8192), 1.2, 60) == pytest.approx(8192, rel=0.002)  # integer counts


def test_an_outlier_and_a_flood_change_nothing() -> None:
    calibration = PromptCalibration()
    calibration.observe(1024, 99_999)  # e.g. a server bug or a cached prefix counted twice
    calibration.observe(0, 10)  # nothing to learn from
    for _ in range(10_000):
        calibration.observe(1024, 1382)
    assert calibration.ratio == pytest.approx(1382 / 1024)
    assert len(calibration._points()) <= 8  # bounded memory per size band


def test_calibrated_tokens_build_in_server_tokens_with_the_prefix_property() -> None:
    calibration = PromptCalibration()
    for _ in range(CALIBRATION_RESPONSES):
        calibration.observe(500, 675)
    tokens = CalibratedTokens("m", calibration)
    long, short = tokens.build_text(1000, seed=3), tokens.build_text(400, seed=3)
    assert long.startswith(short)
    assert tokens.count(long) == pytest.approx(1000, abs=1)
    assert server(text_tokens(long) + MESSAGE_OVERHEAD_TOKENS, 1.35) - MESSAGE_OVERHEAD_TOKENS == pytest.approx(
        1000, abs=2
    )


def test_traffic_sizes_by_the_calibration_once_learned(tmp_path: Path) -> None:
    """A model without a tokenizer: the estimator first, then calibrated plans; another model is untouched."""
    config = load_config(config_with(tmp_path, {"p": {"prompt_tokens": 1024, "max_tokens": 8}}))
    workload = Workload(config)
    traffic = Traffic(config, workload, lambda: (0, 1))
    first = workload.next(traffic.sizer(["gqa_model"]))
    assert not first.calibrated and prompt_tokens(first.messages) == 1024
    for _ in range(CALIBRATION_RESPONSES):
        traffic.calibration.observe("gqa_model", first.messages, server(1024, 1.35))
    plan = workload.next(traffic.sizer(["gqa_model"]))
    assert plan.calibrated
    assert abs(server(prompt_tokens(plan.messages), 1.35) - 1024) <= 2
    assert traffic.sizer(["mla_model"]) is None  # learned per model


def test_results_say_how_prompts_were_sized(tmp_path: Path) -> None:
    config = load_config(config_with(tmp_path, {"p": {"prompt_tokens": 64}}, tokenizer=word_level(tmp_path)))
    plain, tokenized = config.models
    series = Series()
    assert prompt_sizes(plain, series) == "estimated"
    assert prompt_sizes(tokenized, series) == "exact"
    series.counts["calibrated"] = 3
    assert prompt_sizes(plain, series) == "calibrated"
