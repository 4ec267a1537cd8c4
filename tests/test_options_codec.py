"""Run options are encoded once: what ``attnload run`` reads from its command line is what a Locust process
reads back from the environment it is handed, and every option's spellings come from its declaration."""

from __future__ import annotations

import argparse

import pytest

from attnload.errors import UsageError
from attnload.plan.options import (
    OPTIONS,
    RunOptions,
    add_load_arguments,
    environment,
    launch_texts,
    options_from,
    run_options,
    with_shape,
)
from attnload.workload.shapes import parse_shape


def _launch(*flags: str) -> RunOptions:
    parser = argparse.ArgumentParser()
    add_load_arguments(parser)
    shape = parse_shape("rate:2", 10.0)
    texts = with_shape(launch_texts(vars(parser.parse_args(list(flags)))), shape)
    return run_options({**texts, "config": "c.json"}, shape)


def _locust_side(env: dict[str, str]) -> RunOptions:
    """What a Locust process parses: each ``--attnload-*`` option from its variable, else its default."""
    parsed = {o.locust_dest: env.get(o.env, o.locust_default) for o in OPTIONS if o.locust}
    return options_from(argparse.Namespace(**parsed, csv_prefix=None))


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--paired", "--warmup", "5s", "--profile", "a,b", "--arrivals", "constant", "--max-in-flight", "7"),
        ("--burstiness", "0.5", "--abandon-rate", "0.2", "--abandon-after", "5", "--start-spread", "3s"),
        ("--server-metrics", "off", "--server-metrics-interval", "0.5", "--gpu-metrics", "off", "--locust-stats"),
        ("--restart-lost-users", "--accept-foreign-workers", "--metrics-host", "0.0.0.0", "--metrics-port", "0"),
    ],
)
def test_the_processes_read_back_what_the_command_line_said(flags: tuple[str, ...]) -> None:
    launched = _launch(*flags)
    env = environment(launched)
    assert all(name.startswith("ATTNLOAD_") for name in env)
    assert _locust_side(env) == launched


def test_one_on_off_parser_on_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    for text, on in (("on", True), ("YES", True), ("true", True), ("1", True), ("0", False), ("off", False)):
        assert _locust_side({"ATTNLOAD_PAIRED": text}).paired is on
        monkeypatch.setenv("ATTNLOAD_LOCUST_STATS", text)
        assert _launch().locust_stats is on and environment(_launch())["ATTNLOAD_LOCUST_STATS"] == str(int(on))


def test_a_bad_value_is_refused_by_the_launcher_as_by_a_locust_process() -> None:
    with pytest.raises(UsageError, match="--start-spread"):
        _launch("--start-spread", "forever")
    with pytest.raises(UsageError, match="--start-spread"):
        _locust_side({"ATTNLOAD_START_SPREAD": "forever"})
    with pytest.raises(UsageError, match="--snapshot-interval"):
        _launch("--snapshot-interval", "0.5")


def test_every_option_is_spelled_from_its_name() -> None:
    for option in OPTIONS:
        assert option.env == "ATTNLOAD_" + option.name.upper().replace("-", "_")
        assert option.locust_flag == "--attnload-" + option.name and option.run_flag == "--" + option.name
