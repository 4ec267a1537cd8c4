"""Issue 19, CLI part, with real processes: exit codes a CI job can gate on, Locust's flag spellings,
``--csv`` files Locust users recognise, and no traceback when a pipe's reader goes away.

Truth comes from the fixed-mode simulator (TTFT 50 ms, ITL 10 ms exactly) and from the hostile
server, whose ``server_500`` model fails every request.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import FAKES, ROOT, Processes, attnload, free_port, latest_results, start_sim, wait_http, write_config


def run_attnload(processes: Processes, *args: str, timeout: float = 120) -> tuple[int, str]:
    process = processes.start(attnload("run", "--metrics-port", str(free_port()), *args), name="run")
    code = process.wait(timeout=timeout)
    return code, processes.log_of(process)


def start_hostile(processes: Processes) -> str:
    port = free_port()
    process = processes.start(
        [sys.executable, str(FAKES / "hostile_server.py"), "--port", str(port), "--delay-s", "0.02"],
        name="hostile",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", process)
    return url


def locust_csv_headers() -> dict[str, list[str]]:
    """The header rows the installed Locust writes, read in a child (importing Locust here would
    monkey-patch this test process with gevent)."""
    code = (
        "import json; from locust.stats import PERCENTILES_TO_REPORT as P, StatsCSV; s = StatsCSV(None, P); "
        "print(json.dumps({'stats': s.requests_csv_columns, 'failures': s.failures_columns, "
        "'exceptions': s.exceptions_columns}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    headers: dict[str, list[str]] = json.loads(result.stdout)
    return headers


def test_failed_requests_exit_1_unless_exit_code_on_error_0(processes: Processes, tmp_path: Path) -> None:
    hostile = start_hostile(processes)
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "base_url": hostile + "/api",
                "test_prompts": {"short": "hello"},
                "models": {"broken": {"id": "server_500", "attention_type": "MLA"}},
            }
        )
    )
    for extra, expected in (((), 1), (("--exit-code-on-error", "0"), 0)):
        results = tmp_path / f"results{expected}"
        code, log = run_attnload(processes, "-c", str(config), "-u", "2", "-t", "3s", "--results", str(results), *extra)
        data = latest_results(results)["models"][0]
        assert data["requests"]["failed"] > 0 and data["requests"]["ok"] == 0
        assert code == expected, log
        assert ("attnload run: failed requests: broken" in log) == (expected == 1), log
        assert "Traceback" not in log


def test_slo_breach_with_fail_on_slo_exits_1(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "50", "--itl-ms", "10")
    config = write_config(
        tmp_path,
        sim + "/api/v1",
        models={"mla": ("deepseek-chat", "MLA")},
        benchmark={"max_tokens": 8, "repeat": 1},
        slo={"ttft_p99_s": 0.02},
    )
    code, log = run_attnload(
        processes, "-c", str(config), "-u", "2", "-t", "3s", "--fail-on", "slo", "--results", str(tmp_path / "results")
    )
    assert code == 1, log
    line = next(line for line in log.splitlines() if "slo breached" in line)
    measured_ms = float(line.split("TTFT p99 ")[1].split(" ms")[0])
    assert line.startswith("attnload run: slo breached: mla TTFT p99") and line.endswith("> 20 ms")
    # The p99 of a few dozen requests is their slowest, which a loaded 2-core machine can delay by tens of ms
    # (81.7 ms seen in a full suite); the median is the fixed mode's 50 ms.
    assert 50 <= measured_ms < 250, line
    ttft = next(m for m in latest_results(tmp_path / "results")["models"] if m["key"] == "mla")["ttft_s"]
    assert ttft["p50"] == pytest.approx(0.050, abs=0.010)


def test_locust_flags_and_csv_files(processes: Processes, tmp_path: Path) -> None:
    """``-u 8 -r 8 -t 10s --csv PREFIX``: Locust's own four CSVs with its header rows, plus the LLM one
    carrying the simulator's exact TTFT and ITL."""
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "50", "--itl-ms", "10")
    config = write_config(tmp_path, sim + "/api/v1", benchmark={"max_tokens": 16, "repeat": 1})
    prefix = tmp_path / "csv" / "out"
    code, log = run_attnload(
        processes,
        "-c",
        str(config),
        "-u",
        "8",
        "-r",
        "8",
        "-t",
        "10s",
        "--processes",
        "1",
        "--csv",
        str(prefix),
        "--results",
        str(tmp_path / "results"),
    )
    assert code == 0, log
    data = latest_results(tmp_path / "results")
    assert 9.0 <= data["duration_s"] <= 13.0
    headers = locust_csv_headers()
    stats = read_csv(Path(f"{prefix}_stats.csv"))
    assert stats[0] == headers["stats"] and "Median Response Time" in stats[0]
    assert read_csv(Path(f"{prefix}_failures.csv"))[0] == headers["failures"]
    assert read_csv(Path(f"{prefix}_exceptions.csv"))[0] == headers["exceptions"]
    assert read_csv(Path(f"{prefix}_stats_history.csv"))[0][:4] == ["Timestamp", "User Count", "Type", "Name"]
    by_name = {row[1]: dict(zip(stats[0], row, strict=True)) for row in stats[1:]}
    llm = [dict(zip(rows[0], row, strict=True)) for rows in [read_csv(Path(f"{prefix}_llm.csv"))] for row in rows[1:]]
    for summary in data["models"]:
        ok = summary["requests"]["ok"]
        assert ok > 10
        locust_row = by_name[summary["key"]]
        assert int(locust_row["Request Count"]) == ok and int(locust_row["Failure Count"]) == 0
        total = next(r for r in llm if r["Target"] == summary["key"] and r["Stage"] == "Aggregated")
        assert (total["Model"], total["Attention"], int(total["Requests OK"])) == (
            summary["model"],
            summary["attention"],
            ok,
        )
        assert 50.0 <= float(total["TTFT p50 (ms)"]) < 60.0
        assert abs(float(total["ITL p50 (ms)"]) - 10.0) <= 1.0
        assert float(total["Output Tokens/s"]) == pytest.approx(summary["output_tokens_per_s"], abs=0.001)


def read_csv(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.reader(handle))


def results_file(path: Path, tpot_p50_s: float) -> Path:
    model: dict[str, Any] = {
        "key": "mla",
        "model": "deepseek-chat",
        "attention": "MLA",
        "requests": {"ok": 100},
        "ttft_s": {"count": 100, "p50": 0.05, "p99": 0.06},
        "tpot_s": {"count": 100, "p50": tpot_p50_s, "p99": tpot_p50_s},
        "output_tokens_per_s": 500.0,
        "requests_per_s": 5.0,
    }
    path.write_text(
        json.dumps(
            {
                "schema": "attnload.results/v1",
                "started_at": "2026-01-01T00:00:00Z",
                "ended_at": "2026-01-01T00:01:00Z",
                "duration_s": 60.0,
                "config_sha256": "0" * 64,
                "models": [model],
            }
        ),
        encoding="utf-8",
    )
    return path


def test_report_compare_fail_on_regression(tmp_path: Path) -> None:
    baseline = results_file(tmp_path / "base.json", 0.010)
    current = results_file(tmp_path / "cur.json", 0.012)  # TPOT p50 20 % worse
    for pct, expected in (("10", 1), ("30", 0)):
        result = subprocess.run(
            attnload(
                "report",
                str(current),
                "--compare",
                str(baseline),
                "--fail-on-regression",
                pct,
                "--html",
                str(tmp_path / f"r{pct}.html"),
            ),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == expected, result.stdout + result.stderr
        regressions = [line for line in result.stderr.splitlines() if "regression:" in line]
        assert regressions == (
            ["attnload report: regression: mla: TPOT p50 10.0 ms → 12.0 ms (+20.0%)"] if expected else []
        )
    result = subprocess.run(
        attnload("report", str(current), "--fail-on-regression", "10"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "needs --compare" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "command",
    ["sim --list | head -1", "sim --list | true", "sim --throughput --models deepseek-v3 --num-prompts 20 | true"],
)
def test_closed_pipe_has_no_traceback(command: str) -> None:
    exe = " ".join(attnload())
    result = subprocess.run(
        ["bash", "-c", f"{exe} {command}; echo rc=${{PIPESTATUS[0]}} >&2"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] in ("rc=0", "rc=141")  # 141: 128 + SIGPIPE, as a shell tool
    if "head" in command:
        assert result.stdout.startswith("presets on ")


def test_plain_locust_csv_gets_the_llm_file_too(processes: Processes, tmp_path: Path) -> None:
    sim = start_sim(processes, "--mode", "fixed", "--ttft-ms", "50", "--itl-ms", "10")
    config = write_config(tmp_path, sim + "/api/v1", benchmark={"max_tokens": 8, "repeat": 1})
    prefix = tmp_path / "plain"
    locust = processes.start(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "locustfiles" / "chat.py"),
            "--headless",
            "-u",
            "2",
            "-r",
            "2",
            "-t",
            "3s",
            "--csv",
            str(prefix),
        ],
        env={
            "ATTNLOAD_CONFIG": str(config),
            "ATTNLOAD_RESULTS": str(tmp_path / "results"),
            "ATTNLOAD_METRICS_PORT": "0",
        },
        name="locust",
    )
    assert locust.wait(timeout=60) == 0, processes.log_of(locust)
    rows = read_csv(Path(f"{prefix}_llm.csv"))
    assert Path(f"{prefix}_stats.csv").is_file()
    aggregated = {row[0]: int(row[6]) for row in rows[1:] if row[3] == "Aggregated"}
    assert set(aggregated) == {"gqa_model", "mla_model"} and min(aggregated.values()) > 0
