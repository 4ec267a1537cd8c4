"""promtool over the Prometheus files: config, rules, rule unit tests, and every dashboard expr's syntax.

CI installs promtool (Debian package ``prometheus``); without it these tests skip
with that reason rather than pass silently.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from attnload.dashboards.prometheus import write_config

REPO = Path(__file__).resolve().parents[1]
PROM_DIR = REPO / "grafana" / "prometheus"
DASHBOARD_DIR = REPO / "grafana" / "dashboards"
PROMTOOL = shutil.which("promtool")

pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")


def promtool(*args: str, cwd: Path | None = None) -> str:
    assert PROMTOOL is not None
    proc = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False)
    assert proc.returncode == 0, f"promtool {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def test_check_config() -> None:
    out = promtool("check", "config", str(PROM_DIR / "prometheus.yml"))
    assert "SUCCESS" in out


def test_local_config_scrapes_master_and_sim() -> None:
    config = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text(encoding="utf-8"))
    jobs = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    # model-servers: the documented slot for real vLLM/SGLang servers, empty by default.
    assert jobs == {"attnload": ["127.0.0.1:9646"], "attnload-sim": ["127.0.0.1:8000"], "model-servers": []}
    assert config["rule_files"] == ["rules.yml"]


def test_check_rules() -> None:
    out = promtool("check", "rules", str(PROM_DIR / "rules.yml"))
    assert "SUCCESS" in out


def test_rules_have_the_three_alerts() -> None:
    rules = yaml.safe_load((PROM_DIR / "rules.yml").read_text(encoding="utf-8"))
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == {"AttnloadClientSaturated", "AttnloadErrorRateHigh", "AttnloadTTFTSLOBreached"}
    records = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    assert "target_profile:attnload_time_to_first_token_seconds:p99_rate1m" in records
    assert all(re.fullmatch(r"[a-z_]+:attnload_[a-z_]+:[a-z0-9_]+", r) for r in records), records


def test_rule_unit_tests() -> None:
    out = promtool("test", "rules", str(PROM_DIR / "rules_test.yml"))
    assert "SUCCESS" in out


def test_every_alert_has_a_unit_test() -> None:
    rules = yaml.safe_load((PROM_DIR / "rules.yml").read_text(encoding="utf-8"))
    tests = yaml.safe_load((PROM_DIR / "rules_test.yml").read_text(encoding="utf-8"))
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    firing = {t["alertname"] for case in tests["tests"] for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    quiet = {t["alertname"] for case in tests["tests"] for t in case.get("alert_rule_test", []) if not t["exp_alerts"]}
    assert alerts <= firing and alerts <= quiet


def test_dashboard_exprs_parse(tmp_path: Path) -> None:
    """Each panel query, with Grafana variables expanded, is valid PromQL (promtool parses rule exprs)."""
    rules = []
    for path in sorted(DASHBOARD_DIR.glob("*.json")):
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        exprs += [a["expr"] for a in dashboard["annotations"]["list"] if a.get("expr")]
        for i, expr in enumerate(exprs):
            expanded = expr.replace("$__rate_interval", "1m")
            for var in ("model", "attention", "profile", "target", "namespace", "job"):
                expanded = expanded.replace(f"${var}", ".*")
            rules.append({"record": f"dashboard:{path.stem.replace('-', '_')}:expr{i}", "expr": expanded})
    file = tmp_path / "dashboard_exprs.yml"
    file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}), encoding="utf-8")
    out = promtool("check", "rules", str(file))
    assert f"SUCCESS: {len(rules)} rules found" in out


def test_launcher_config_is_valid(tmp_path: Path) -> None:
    path = write_config(
        {"attnload": "127.0.0.1:9646", "attnload-sim": "127.0.0.1:8000"},
        tmp_path,
        scrape_interval_s=1.0,
        rules_file=PROM_DIR / "rules.yml",
    )
    out = promtool("check", "config", str(path))
    assert "SUCCESS" in out and (tmp_path / "rules.yml").is_file()
