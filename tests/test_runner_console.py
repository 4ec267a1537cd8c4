"""How ``attnload run`` asks Locust for a quiet console: the master's flags, the
``ATTNLOAD_LOCUST_STATS`` value handed to every process, and the logger Locust's tables use."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from attnload.config.load import load_config
from attnload.plan.launch import LoadPlan, _environment, _master_command
from attnload.plan.options import run_options, truthy
from attnload.workload.shapes import parse_shape


def plan(tmp_path: Path, **texts: str) -> LoadPlan:
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {"base_url": "http://127.0.0.1:9/api", "models": {"m": {"id": "deepseek-chat", "attention_type": "MLA"}}}
        )
    )
    given = {"config": str(path), "results": str(tmp_path), "metrics-port": "0", "locust-stats": "0", **texts}
    options = run_options(given, parse_shape("concurrency:2", 5.0))
    return LoadPlan(config=load_config(path), options=options, workers=1, results_dir=tmp_path)


def test_default_master_has_no_periodic_table_and_every_process_is_told_quiet(tmp_path: Path) -> None:
    quiet = plan(tmp_path)
    assert "--only-summary" in _master_command(quiet, 5557)
    assert _environment(quiet)["ATTNLOAD_LOCUST_STATS"] == "0"  # workers inherit the same environment
    loud = plan(tmp_path, **{"locust-stats": "1"})
    assert "--only-summary" not in _master_command(loud, 5557) and "--headless" in _master_command(loud, 5557)
    assert _environment(loud)["ATTNLOAD_LOCUST_STATS"] == "1"


@pytest.mark.parametrize(
    ("text", "on"),
    [("1", True), ("true", True), ("YES", True), ("on", True), ("0", False), ("", False), ("no", False), (None, False)],
)
def test_on_off_values(text: str | None, on: bool) -> None:
    assert truthy(text) is on


def test_silencing_mutes_only_locusts_table_logger() -> None:
    """In a child: importing Locust here would monkey-patch the test process with gevent."""
    code = (
        "import logging; from attnload.runner.collector.progress import silence_locust_tables, LOCUST_TABLES_LOGGER; "
        "silence_locust_tables(); print(logging.getLogger(LOCUST_TABLES_LOGGER).disabled, "
        "logging.getLogger('locust.runners').disabled, LOCUST_TABLES_LOGGER)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["True", "False", "locust.stats_logger"]
    assert not logging.getLogger("locust.stats_logger").disabled
