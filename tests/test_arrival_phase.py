"""Each closed-loop stage says how its users were started: the ``--start-spread`` mode and the measured
spread of its new users' first requests, merged over workers (``runner/sender/arrivalphase.py``)."""

from __future__ import annotations

import pytest

from attnload.report.clienthealth.render import html_section, spread_text
from attnload.results.model import ModelSummary, StageSummary
from attnload.runner.sender.arrivalphase import FirstRequests, FleetFirstRequests, spread_info, with_start_spread
from helpers.results import envelope


def _fleet() -> FleetFirstRequests:
    """Two workers: stage 0 of model a starts users at 100.0..100.4 and 100.1..100.9; stage 1 one user."""
    w1, w2 = FirstRequests(), FirstRequests()
    for at in (100.0, 100.4, 100.2):
        w1.note(["a"], 0, at)
    for at in (100.9, 100.1):
        w2.note(["a"], 0, at)
    w2.note(["a"], 1, 130.0)
    w1.note(["a", "b"], 1, 131.0)  # --paired: a user drives every model
    w1.note(["a"], -1, 99.0)  # before any stage: not a stage's user
    fleet = FleetFirstRequests()
    fleet.merge("w1", w1.payload())
    fleet.merge("w2", w2.payload())
    fleet.merge("w3", "not rows")
    return fleet


def test_first_requests_merge_over_workers() -> None:
    stamps = _fleet().combined()
    assert stamps[("a", 0)] == (100.0, 100.9, 5)
    assert stamps[("a", 1)] == (130.0, 131.0, 2)
    assert stamps[("b", 1)] == (131.0, 131.0, 1)
    assert ("a", -1) not in stamps


def test_a_later_report_replaces_the_workers_earlier_one() -> None:
    worker = FirstRequests()
    worker.note(["a"], 0, 10.0)
    fleet = FleetFirstRequests()
    fleet.merge("w1", worker.payload())
    worker.note(["a"], 0, 12.5)
    fleet.merge("w1", worker.payload())  # cumulative: counted once
    assert fleet.combined()[("a", 0)] == (10.0, 12.5, 2)


@pytest.mark.parametrize(
    ("mode", "shown", "seconds"),
    [("auto", "auto", None), ("off", "off", None), (2.0, "fixed", 2.0)],
)
def test_spread_info_says_the_mode_and_the_measured_spread(
    mode: str | float, shown: str, seconds: float | None
) -> None:
    info = spread_info(mode, _fleet().combined(), "a", 0)
    assert (info.mode, info.seconds, info.users, info.first_requests_spread_s) == (shown, seconds, 5, 0.9)
    lone = spread_info(mode, _fleet().combined(), "b", 1)
    assert lone.users == 1 and lone.first_requests_spread_s is None  # one user has no spread
    none = spread_info(mode, {}, "a", 3)
    assert none.users == 0 and none.first_requests_spread_s is None


def test_every_closed_loop_stage_records_it_and_open_loop_stages_do_not() -> None:
    model = ModelSummary(
        key="a",
        model="a",
        attention="gqa",
        stages=[StageSummary(index=0, users=5), StageSummary(index=1, users=7), StageSummary(index=2, rate=2.0)],
    )
    results = with_start_spread(envelope(model), "auto", _fleet().combined())
    first, second, open_loop = results.models[0].stages
    assert first.start_spread is not None and first.start_spread.first_requests_spread_s == 0.9
    assert second.start_spread is not None and second.start_spread.users == 2
    assert open_loop.start_spread is None
    html = html_section(results)
    assert 'id="start-spread"' in html and "0.90 s" in html
    assert spread_text(first.start_spread) == "auto: 5 new users, first requests over 0.90 s"


def test_an_unstaged_run_says_it_per_model() -> None:
    results = with_start_spread(envelope(ModelSummary(key="a", model="a", attention="gqa")), 3.0, _fleet().combined())
    info = results.models[0].start_spread
    assert info is not None and info.mode == "fixed" and info.seconds == 3.0 and info.users == 5
    assert spread_text(info) == "fixed 3 s: 5 new users, first requests over 0.90 s"
