"""Fixtures shared by every test directory, and what pytest-xdist workers need (helpers: ``tests/helpers/``)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import Processes

KEEPALIVE_S = 1.0  # a timer for the hub to wait on (the next test wakes the worker at once, not on this tick)

SERIAL = (
    # judged by latencies, rates or arrival times to a few milliseconds or percent (a test whose margin is
    # seconds, or that says it was measured on a loaded machine, runs on the workers)
    "tests/e2e/test_acceptance_7_13.py",
    "tests/e2e/test_arrivals_e2e.py",
    "tests/e2e/test_agent_e2e.py::test_each_step_resends_history_reply_tool_call_and_result",  # tool time, 20 ms
    "tests/e2e/test_agent_e2e.py::test_idle_gqa_sessions_are_evicted_where_mla_stays_resident",
    "tests/e2e/test_agent_e2e.py::test_a_session_trace_replays_steps_in_order_after_each_answer",
    "tests/browser/test_locust_llm_tab.py",
    "tests/e2e/test_ci_e2e.py::test_slo_breach_with_fail_on_slo_exits_1",
    "tests/e2e/test_ci_e2e.py::test_locust_flags_and_csv_files",
    "tests/e2e/test_core_e2e.py::test_plain_locust_master_two_workers_fixed_truth",
    "tests/e2e/test_core_e2e.py::test_attnload_run_counts_itl_per_token",
    "tests/e2e/test_fleet_io_e2e.py::test_a_dead_server_is_backed_off_and_answered_again_soon_after_it_returns",
    "tests/e2e/test_fleet_io_e2e.py::test_results_directory_unwritable_mid_run_go_to_a_named_fallback",  # at 1 s
    "tests/e2e/test_fleet_io_e2e.py::test_open_loop_arrivals_inside_the_backoff_are_counted_dropped",
    "tests/e2e/test_ladder_e2e.py",  # ITL p50 per rung within 10 % of the simulator's step
    "tests/e2e/test_fleet_faults_e2e.py",  # a kill at 10 s, a freeze of 8 s: the checks read those times
    "tests/e2e/test_observability_e2e.py::test_same_model_id_on_two_servers_stays_two_series",
    "tests/e2e/test_reasoning_e2e.py",
    "tests/e2e/test_spec_decode_e2e.py::test_fixed_mode_speculation_is_exact",  # TTFT 20 ms, e2e 50 ms
    "tests/e2e/test_requests_out_e2e.py::test_one_line_per_request_matching_the_server",
    "tests/e2e/test_server_metrics_e2e.py::test_sim_counters_match_the_simulator_exactly",  # done by the last scrape
    "tests/e2e/test_server_metrics_e2e.py::test_gqa_queues_only_in_the_saturated_stage",  # (the same module run)
    "tests/e2e/test_traffic_e2e.py::test_dataset_prompts_come_from_the_file",  # two workers' order, to a pair
    "tests/e2e/test_traffic_e2e.py::test_conversations_resend_the_streamed_reply_and_think",
    "tests/e2e/test_traffic_e2e.py::test_mooncake_replay_keeps_the_trace_offsets",
    "tests/e2e/test_traffic_e2e.py::test_replay_speed_two_halves_the_offsets",
    "tests/e2e/test_traffic_e2e.py::test_open_loop_conversations_schedule_turns_after_answer_and_think",
    "tests/e2e/test_workloads_e2e.py::test_concurrency_stages_users_and_warmup",
    "tests/e2e/test_workloads_e2e.py::test_rate_mode_hits_the_target_and_a_stall_is_lag_not_fewer_sends",
    "tests/e2e/test_workloads_e2e.py::test_poisson_rate_is_seeded_and_exact_per_stage",
    "tests/e2e/test_workloads_e2e.py::test_goodput_equals_a_hand_count",
    "tests/test_apis.py::test_reasoning_first_then_answer_exact_in_fixed_mode",
    "tests/test_sim_cli.py::test_7_11_tokens_per_event_keeps_client_mean_itl",  # mean ITL to 1 %
    "tests/test_fastread.py::test_whole_exchanges_end_the_same_on_both_paths",  # scripted pauses vs read timeouts
    "tests/e2e/test_apis_e2e.py::test_each_api_measures_as_chat_and_counts_as_the_simulator",
    "tests/test_client.py::test_retry_after_backoff_delays_the_next_request",
    "tests/test_client_budgets.py::test_each_runaway_mode_fails_fast_and_classified",
    "tests/test_client_budgets.py::test_runaway_total_timeout_is_a_wall_clock",
    "tests/test_client_budgets.py::test_within_returns_at_the_deadline_when_the_probe_hangs",
    "tests/test_client_perf_guard.py::test_attnload_costs_less_cpu_per_token_than_naive_baseline",
    "tests/test_findings_real_engine.py::test_first_stage_pilot_then_offsets_of_its_duration",
    "tests/test_findings_real_engine.py::test_later_stage_uses_the_observed_e2e_and_off_waits_for_nothing",
    "tests/test_findings_real_engine.py::test_a_pilot_that_never_answers_releases_the_others_at_the_cap",
)
"""The tests whose assertions read the wall clock (a latency, a rate, an elapsed time): marked ``serial``
here, in one list, so `make test` runs them alone after the xdist workers are done (a module or a test;
a test's parametrized cases follow it). An entry that names no test fails the run."""


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """Real processes started by the test; all stopped (then killed) at teardown."""
    group = Processes(tmp_path)
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture(params=["compiled", "python"])
def client_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a test on the compiled per-chunk path and on the pure-Python one (attnload.native).

    The compiled case skips where the extension was not built or ATTNLOAD_PURE_PYTHON=1 turns it off
    (the CI's pure-Python step), so the same tests check whichever paths this install has.
    """
    from attnload import native

    if request.param == "compiled" and (native.extension() is None or native.forced_pure()):
        pytest.skip("the compiled path is not built or ATTNLOAD_PURE_PYTHON=1")
    native.use(request.param == "compiled")
    try:
        yield request.param
    finally:
        native.reset()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """In the xdist controller: hand each worker the environment's own ``COLUMNS`` (or its absence).

    The controller imports GNU readline, which writes ``COLUMNS=80`` into the C environment that the
    workers inherit; a serial run never sees it, and the live progress line truncates at it.
    """
    node.workerinput["columns"] = os.environ.get("COLUMNS")


def pytest_configure(config: pytest.Config) -> None:
    _hear_sigint()
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        _restore_columns(workerinput.get("columns"))
        _cooperate_with_execnet()


def _hear_sigint() -> None:
    """Let the processes a test starts hear the SIGINT it sends them (the Ctrl-C tests).

    A shell without job control starts a background command (``make test &``, a CI script's ``&``) with
    SIGINT ignored, every child inherits that, and a Python child keeps ignoring it: `attnload run` then
    ran to its end and exited 0. A handler here is reset to the default at the children's exec."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _restore_columns(columns: str | None) -> None:
    if columns is None:
        os.environ.pop("COLUMNS", None)
    else:
        os.environ["COLUMNS"] = columns


def _cooperate_with_execnet() -> None:
    """Let an xdist worker survive Locust's gevent monkey-patching.

    Importing Locust (as most test modules do) patches ``threading`` after execnet's reader thread has
    started; the worker's main thread then waits for its next test on a gevent lock that the reader
    thread releases. With nothing scheduled on the hub, gevent ends that wait with ``LoopExit`` (seen as
    xdist's ``INTERNALERROR ... KeyError: <WorkerController gw1>``). Patching now, before any test
    module, as a serial run's collection would, and keeping one greenlet asleep on a timer gives the
    hub something to run, so the cross-thread release wakes the main thread.
    """
    import gevent
    import locust  # noqa: F401  (monkey-patches the process, as collecting the first test module would)

    def keep_hub_alive() -> None:
        while True:
            gevent.sleep(KEEPALIVE_S)

    gevent.spawn(keep_hub_alive)


LONG = (
    # wall-clock tests of half a minute or more each (rates, arrival statistics, replays, every API in turn, a CPU
    # comparison): marked `scenario`, so `make test-scenarios` (a CI step of its own) runs them alone and
    # `make test` stays within its 15 minutes
    "tests/e2e/test_arrivals_e2e.py",
    "tests/e2e/test_workloads_e2e.py::test_rate_mode_hits_the_target_and_a_stall_is_lag_not_fewer_sends",
    "tests/e2e/test_workloads_e2e.py::test_poisson_rate_is_seeded_and_exact_per_stage",
    "tests/e2e/test_traffic_e2e.py::test_mooncake_replay_keeps_the_trace_offsets",
    "tests/e2e/test_traffic_e2e.py::test_replay_speed_two_halves_the_offsets",
    "tests/e2e/test_apis_e2e.py::test_each_api_measures_as_chat_and_counts_as_the_simulator",
    "tests/e2e/test_requests_out_e2e.py::test_one_line_per_request_matching_the_server",
    "tests/test_client_perf_guard.py::test_attnload_costs_less_cpu_per_token_than_naive_baseline",
)


@pytest.hookimpl(tryfirst=True)  # before -m deselects: `-m serial` selects by this mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _check_serial_entries(config.rootpath)
    for item in items:
        test = item.nodeid.split("[", 1)[0]
        if any(test == entry or test.startswith(entry + "::") for entry in SERIAL):
            item.add_marker(pytest.mark.serial)
        if any(test == entry or test.startswith(entry + "::") for entry in LONG):
            item.add_marker(pytest.mark.scenario)


def _check_serial_entries(root: Path) -> None:
    """A renamed or moved test must not leave the serial run (or the scenario step) without a word."""
    stale = []
    for entry in (*SERIAL, *LONG):
        path, _, name = entry.partition("::")
        if not (root / path).is_file() or (name and f"def {name}(" not in (root / path).read_text(encoding="utf-8")):
            stale.append(entry)
    if stale:
        raise pytest.UsageError(f"tests/conftest.py SERIAL or LONG names tests that do not exist: {stale}")
