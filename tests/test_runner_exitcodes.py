"""The CI exit policy: results in, ``(code, reasons)`` out, called directly; plus the flag
spellings it shares with Locust and the ``--csv`` LLM file, all without processes."""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any

import pytest

from attnload.cluster.cli import configure as configure_cluster
from attnload.config.model import Slo
from attnload.errors import UsageError
from attnload.plan.options import add_load_arguments
from attnload.report.compare import compare_results, regression_status
from attnload.report.csvout import LLM_CSV_COLUMNS, write_llm_csv
from attnload.results.exitcodes import ExitPolicy, make_policy, parse_fail_on, run_status
from attnload.results.model import ClientInfo, ModelSummary, StageSummary
from helpers.results import envelope as results


def model(
    key: str = "mla",
    *,
    ok: int = 10,
    failed: int = 0,
    ttft_p99: float = 0.1,
    tpot_p50: float = 0.01,
    stages: list[StageSummary] | None = None,
    **extra: Any,
) -> ModelSummary:
    return ModelSummary.model_validate(
        {
            "key": key,
            "model": f"{key}-id",
            "attention": "MLA",
            "requests": {"ok": ok, "failed": failed},
            "ttft_s": {"count": ok, "p50": 0.05, "p99": ttft_p99, "max": ttft_p99},
            "itl_s": {"count": ok, "p50": 0.01, "p99": 0.02, "max": 0.02},
            "tpot_s": {"count": ok, "p50": tpot_p50, "p99": tpot_p50, "max": tpot_p50},
            "e2e_s": {"count": ok, "p50": 0.5, "p99": 0.6, "max": 0.6},
            "output_tokens_per_s": 100.0,
            "requests_per_s": 2.0,
            "stages": stages or [],
            **extra,
        }
    )


# ------------------------------------------------------------------ run_status


def test_clean_run_exits_0() -> None:
    assert run_status(results(model()), ExitPolicy()) == (0, [])


def test_failed_requests_exit_with_exit_code_on_error() -> None:
    run = results(model("gqa", ok=7, failed=3), model("mla"))
    code, reasons = run_status(run, ExitPolicy())
    assert code == 1 and reasons == ["failed requests: gqa 3/10 (--exit-code-on-error 0 ignores them)"]
    assert run_status(run, ExitPolicy(on_error=3))[0] == 3
    assert run_status(run, ExitPolicy(on_error=0)) == (0, [])


def test_cancellations_are_not_failures() -> None:
    cancelled = model().model_copy(update={"requests": model().requests.model_copy(update={"cancelled": 4})})
    assert run_status(results(cancelled), ExitPolicy()) == (0, [])


def test_slo_breach_exits_1_only_when_asked() -> None:
    slo = Slo(ttft_p99_s=0.2, e2e_p99_s=1.0)
    run = results(model("gqa", ttft_p99=0.25), model("mla", ttft_p99=0.15))
    assert run_status(run, ExitPolicy(slo=slo)) == (0, [])
    code, reasons = run_status(run, ExitPolicy(fail_on=frozenset({"slo"}), slo=slo))
    assert code == 1 and reasons == ["slo breached: gqa TTFT p99 250.0 ms > 200 ms"]


def test_saturated_and_server_gap() -> None:
    gap = StageSummary(index=2, users=64, flags=["server_client_gap"])
    run = results(
        model(stages=[StageSummary(index=1, users=8), gap]),
        client=ClientInfo(client_saturated=True, saturation_reasons=["cpu 97% on worker w1"]),
    )
    code, reasons = run_status(run, ExitPolicy(fail_on=frozenset({"saturated", "server-gap"})))
    assert code == 1
    assert reasons == [
        "client saturated (cpu 97% on worker w1): the client, not the server, may have set the latencies",
        "server/client gap: mla stage 2 (64 users)",
    ]
    assert run_status(run, ExitPolicy()) == (0, [])


def test_failures_code_wins_and_every_reason_is_listed() -> None:
    run = results(model(failed=1), client=ClientInfo(client_saturated=True))
    code, reasons = run_status(run, ExitPolicy(on_error=4, fail_on=frozenset({"saturated"})))
    assert code == 4 and len(reasons) == 2


def test_policy_flags_are_validated_up_front() -> None:
    assert parse_fail_on(" slo, server-gap ") == {"slo", "server-gap"}
    assert parse_fail_on("") == frozenset()
    with pytest.raises(UsageError, match="--fail-on latency: unknown reason"):
        parse_fail_on("slo,latency")
    with pytest.raises(UsageError, match="config sets no slo"):
        make_policy(1, "slo", Slo())
    with pytest.raises(UsageError, match="--exit-code-on-error 300"):
        make_policy(300, "", Slo())
    assert make_policy(None, "saturated", Slo()) == ExitPolicy(on_error=1, fail_on=frozenset({"saturated"}))


# ------------------------------------------------------------------ report --fail-on-regression


def test_regression_gate_uses_the_percentage() -> None:
    baseline = results(model(tpot_p50=0.010))
    current = results(model(tpot_p50=0.012))  # TPOT p50 20 % worse
    code, lines = regression_status(compare_results(current, baseline, threshold=0.10))
    assert code == 1 and lines == ["regression: mla: TPOT p50 10.0 ms → 12.0 ms (+20.0%)"]
    assert regression_status(compare_results(current, baseline, threshold=0.30)) == (0, [])
    assert regression_status(compare_results(baseline, current, threshold=0.10)) == (0, [])  # an improvement


def test_regression_gate_counts_a_failure_ratio_rise() -> None:
    code, lines = regression_status(compare_results(results(model(ok=8, failed=2)), results(model()), 0.5))
    assert code == 1 and lines == ["regression: mla: failure ratio 0.0% → 20.0%"]


# ------------------------------------------------------------------ Locust's flag spellings


def parse_run(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_load_arguments(parser)
    return parser.parse_args(list(argv))


def test_locust_short_flags_and_old_names_are_one_option() -> None:
    short = parse_run("-u", "8", "-r", "4", "-t", "10s", "--processes", "2", "--csv", "out/run")
    long = parse_run("--users", "8", "--spawn-rate", "4", "--run-time", "10s", "--workers", "2", "--csv", "out/run")
    old = parse_run("--users", "8", "--spawn-rate", "4", "--duration", "10s", "--workers", "2", "--csv", "out/run")
    assert vars(short) == vars(long) == vars(old)
    assert (short.users, short.spawn_rate, short.duration, short.workers, short.csv) == (8, 4.0, "10s", 2, "out/run")
    defaults = parse_run()
    assert (defaults.exit_code_on_error, defaults.fail_on, defaults.csv) == (1, "", None)


def test_cluster_run_takes_the_same_spellings() -> None:
    parser = argparse.ArgumentParser()
    configure_cluster(parser)
    for flags in (
        ["-u", "5", "-r", "2", "-t", "1m"],
        ["--users", "5", "--spawn-rate", "2", "--run-time", "1m"],
        ["--users", "5", "--spawn-rate", "2", "--duration", "1m"],
    ):
        args = parser.parse_args(["run", *flags])
        assert (args.users, args.spawn_rate, args.run_time) == (5, 2.0, "1m")


# ------------------------------------------------------------------ --csv: the LLM columns


def test_llm_csv_has_a_row_per_stage_and_an_aggregated_row(tmp_path: Path) -> None:
    stage = StageSummary.model_validate(
        {
            "index": 0,
            "users": 8,
            "requests": {"ok": 4},
            "ttft_s": {"count": 4, "p50": 0.05, "p99": 0.06},
            "output_tokens_per_s": 50.0,
        }
    )
    path = write_llm_csv(results(model(stages=[stage])), tmp_path / "sub" / "run")
    assert path == tmp_path / "sub" / "run_llm.csv"
    rows = list(csv.reader(path.open(encoding="utf-8")))
    assert tuple(rows[0]) == LLM_CSV_COLUMNS
    first, total = (dict(zip(rows[0], r, strict=True)) for r in rows[1:])
    assert (first["Target"], first["Stage"], first["Users"], first["Requests OK"]) == ("mla", "0", "8", "4")
    assert (first["TTFT p50 (ms)"], first["ITL p50 (ms)"], first["Output Tokens/s"]) == ("50.000", "N/A", "50.000")
    assert (total["Stage"], total["Model"], total["Attention"]) == ("Aggregated", "mla-id", "MLA")
    assert (total["TTFT p99 (ms)"], total["TPOT p50 (ms)"], total["Requests Failed"]) == ("100.000", "10.000", "0")
