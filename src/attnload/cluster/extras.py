"""The generated parts of deploy/extras/: kube-prometheus objects made from grafana/.

For a cluster that already runs the Prometheus Operator (kube-prometheus or the
kube-prometheus-stack Helm chart) instead of attnload's own Prometheus and Grafana:

- a PrometheusRule holding grafana/prometheus/rules.yml's groups unchanged, so the
  operator's Prometheus records and alerts exactly what the in-namespace one does;
- one ConfigMap per grafana/dashboards/*.json labelled ``grafana_dashboard: "1"``, the
  label the Grafana dashboard sidecar (k8s-sidecar) watches by default.

``python -m attnload.cluster.generate`` writes them beside the hand-written extras
(ServiceMonitors, the headless Job); tests/test_deploy_extras.py fails on drift and
validates them against the operator's CRD schemas.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from attnload.cluster import names

DASHBOARD_LABEL = {"grafana_dashboard": "1"}
# k8s-sidecar puts a dashboard in this folder when the chart sets folderAnnotation to it.
DASHBOARD_FOLDER_ANNOTATION = {"grafana_folder": "attnload"}
# What the older kube-prometheus ruleSelector matches; harmless where the selector is {}.
RULE_LABELS = {"prometheus": "k8s", "role": "alert-rules"}


def prometheus_rule(root: Path) -> tuple[dict[str, Any], list[str]]:
    path = root / "grafana" / "prometheus" / "rules.yml"
    if not path.is_file():
        return _rule_object([]), ["defaults"]
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise SystemExit(f"{path}: not valid YAML: {exc}") from None
    return _rule_object(list(doc.get("groups") or [])), [str(path.relative_to(root))]


def _rule_object(groups: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "attnload",
            "namespace": names.NAMESPACE,
            "labels": {**names.labels("prometheus"), **RULE_LABELS},
        },
        "spec": {"groups": groups},
    }


def dashboard_config_maps(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """One ConfigMap per dashboard: each stays far below the 256 KiB apply annotation cap."""
    files = sorted((root / "grafana" / "dashboards").glob("*.json"))
    maps = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        stem = path.stem.removeprefix("attnload-")
        maps.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"attnload-dashboard-{stem}",
                    "namespace": names.NAMESPACE,
                    "labels": {**names.labels("grafana"), **DASHBOARD_LABEL},
                    "annotations": dict(DASHBOARD_FOLDER_ANNOTATION),
                },
                "data": {path.name: text},
            }
        )
    return maps, [str(p.relative_to(root)) for p in files] or ["grafana/dashboards/ (empty)"]
