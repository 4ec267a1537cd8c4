"""The progress line: what it says, and when it is written on a terminal and in a log.

A fake clock drives :class:`ProgressPrinter`, so the 30 s log cadence and the tok/s window are
checked exactly, without waiting.
"""

from __future__ import annotations

import io

from attnload.report.live.progress import (
    ERASE_LINE,
    LOG_INTERVAL_S,
    ProgressPrinter,
    ProgressState,
    clock_text,
    format_line,
    is_live_terminal,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def state(elapsed_s: float, stage: int, tokens: dict[str, int] | None = None, **kw: object) -> ProgressState:
    values: dict[str, object] = {
        "stages": 3,
        "total_s": 60.0,
        "users": 16,
        "target_users": 16,
        "ok": 10,
        "failed": 1,
        "completion_tokens": tokens or {"gqa": 0, "mla": 0},
    }
    values.update(kw)
    return ProgressState(elapsed_s=elapsed_s, stage=stage, **values)  # type: ignore[arg-type]


def test_line_names_stage_users_time_counts_and_tok_s_per_model() -> None:
    line = format_line(state(42.0, 1, users=40, target_users=64), {"gqa_model": 2822.4, "mla_model": 1220.0})
    assert line == (
        "stage 2/3 · 40/64 users · 0:42 elapsed, 0:18 left · ok 10 failed 1 · "
        "gqa_model 2,822 tok/s · mla_model 1,220 tok/s"
    )
    assert "req/s per model" in format_line(state(5, 0, target_rate=2.0, users=0, target_users=0), {})
    assert format_line(state(5, 0, stages=None, total_s=None), {}).startswith("stage 1 · 16 users · 0:05 elapsed ·")
    assert "CLIENT SATURATED" in format_line(state(5, 0, saturated=True), {})
    assert (clock_text(59.6), clock_text(3725), clock_text(-3)) == ("1:00", "1:02:05", "0:00")


def test_log_mode_writes_each_stage_once_and_at_most_every_30_s() -> None:
    clock, out = FakeClock(), io.StringIO()
    printer = ProgressPrinter(out, live=False, clock=clock)
    printer.update(state(0, -1))  # before the first stage: nothing
    assert out.getvalue() == ""
    stage_starts = {0: 0, 1: 95, 2: 100}  # stage 2 starts 5 s after stage 1: still its own line
    times = []
    for second in range(0, 181):
        clock.now = 1000.0 + second
        stage = max(i for i, start in stage_starts.items() if second >= start)
        before = out.getvalue().count("\n")
        printer.update(state(second, stage))
        if out.getvalue().count("\n") > before:
            times.append(second)
    lines = out.getvalue().splitlines()
    assert times == [0, 30, 60, 90, 95, 100, 130, 160]
    assert [line.split(" · ")[0] for line in lines] == ["stage 1/3"] * 4 + ["stage 2/3"] + ["stage 3/3"] * 3
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    changes = sum(1 for a, b in zip(lines, lines[1:], strict=False) if a.split(" · ")[0] != b.split(" · ")[0])
    assert sum(1 for g in gaps if g < LOG_INTERVAL_S) <= changes  # short gaps only at stage changes
    assert "\r" not in out.getvalue() and ERASE_LINE not in out.getvalue()
    printer.finish(state(180, 2))
    assert out.getvalue().count("\n") == len(times)  # no extra line at the end: the tables follow


def test_live_mode_redraws_one_line_in_place_and_ends_it() -> None:
    clock, out = FakeClock(), io.StringIO()
    printer = ProgressPrinter(out, live=True, clock=clock)
    for second in range(5):
        clock.now = 1000.0 + second
        printer.update(state(second, 0, tokens={"gqa": 300 * second, "mla": 100 * second}))
    text = out.getvalue()
    assert text.count("\r") == 5 and text.count(ERASE_LINE) == 5 and "\n" not in text
    last = text.rsplit("\r", 1)[1]
    assert "gqa 300 tok/s" in last and "mla 100 tok/s" in last  # 1200 tokens over 4 s
    printer.finish(state(5, 0, tokens={"gqa": 1500, "mla": 500}))
    assert out.getvalue().endswith(ERASE_LINE + "\n")


def test_clear_erases_the_live_line_before_other_output() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, live=True, clock=FakeClock())
    printer.clear()
    assert out.getvalue() == ""  # nothing on screen yet
    printer.update(state(1, 0))
    printer.clear()
    assert out.getvalue().endswith("\r" + ERASE_LINE)
    printer.finish()
    assert not out.getvalue().endswith("\n")  # the line was erased: no empty line before the tables


def test_tok_s_is_over_the_last_ten_seconds() -> None:
    clock, out = FakeClock(), io.StringIO()
    printer = ProgressPrinter(out, live=True, clock=clock)
    tokens = 0
    for second in range(30):
        clock.now = 1000.0 + second
        tokens += 50 if second < 15 else 500  # the rate jumps at 15 s
        printer.update(state(second, 0, tokens={"m": tokens}))
    assert out.getvalue().rsplit("\r", 1)[1].split(" · ")[-1].startswith("m 500 tok/s")


def test_not_a_live_terminal_when_piped_in_ci_or_dumb(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert is_live_terminal(Tty()) and not is_live_terminal(io.StringIO())
    monkeypatch.setenv("CI", "true")
    assert not is_live_terminal(Tty())
    monkeypatch.setenv("CI", "0")
    monkeypatch.setenv("TERM", "dumb")
    assert not is_live_terminal(Tty())
