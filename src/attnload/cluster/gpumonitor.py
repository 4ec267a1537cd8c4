"""deploy/'s Prometheus scrapes NVIDIA's dcgm-exporter where a cluster runs it.

dcgm-exporter is a DaemonSet, one pod per GPU node, serving per-GPU gauges on :9400. deploy/'s
Prometheus finds those pods by Kubernetes pod discovery in the listed namespaces (default
``gpu-operator``, the GPU Operator's), by the labels the two usual installs put on them:
``app=nvidia-dcgm-exporter`` (GPU Operator) or ``app.kubernetes.io/name=dcgm-exporter``
(the exporter's own Helm chart), keeping the container port 9400. ``honor_labels`` keeps the
exporter's own ``namespace``/``pod``/``container`` labels (its pod mapping: which workload
holds each GPU) instead of renaming them ``exported_*``. Written from one namespace list:
the job and NetworkPolicy egress to TCP 9400 in deploy/ (harmless on a cluster without
GPUs: a job with no targets), and the Role + RoleBinding that let Prometheus list pods in
the exporter's namespace in deploy/gpu-operator/ (they live in that namespace, so they are
applied only where it exists: ``kubectl apply -f deploy/gpu-operator/``).

For kube-prometheus, deploy/extras/ gets a ServiceMonitor for the GPU Operator's Service
(port ``gpu-metrics``) and a PodMonitor for the Helm chart's pods (port ``metrics``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnload.cluster import names
from attnload.cluster.discovery import pod_reader_rbac, prometheus_egress

_P = "__meta_kubernetes_pod_"
APP_LABELS = {"app": "nvidia-dcgm-exporter", "app.kubernetes.io/name": "dcgm-exporter"}
"""GPU Operator's pod/Service label, and the dcgm-exporter Helm chart's."""


def scrape_job(namespaces: Sequence[str] = names.DCGM_NAMESPACES) -> dict[str, Any]:
    """The ``dcgm-exporter`` job: exporter pods of ``namespaces`` by label, port 9400, their labels kept."""
    return {
        "job_name": names.DCGM_JOB,
        "honor_labels": True,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": list(namespaces)}}],
        "relabel_configs": [
            {
                "source_labels": [f"{_P}label_app", f"{_P}label_app_kubernetes_io_name"],
                "regex": "nvidia-dcgm-exporter;.*|.*;dcgm-exporter",
                "action": "keep",
            },
            {"source_labels": [f"{_P}phase"], "regex": "Pending|Succeeded|Failed", "action": "drop"},
            {"source_labels": [f"{_P}container_port_number"], "regex": str(names.DCGM_PORT), "action": "keep"},
            {"source_labels": [f"{_P}node_name"], "target_label": "node", "action": "replace"},
        ],
        # Keep the GPU fields only (the exporter also serves its own Go runtime series).
        "metric_relabel_configs": [{"source_labels": ["__name__"], "regex": "DCGM_FI_.+", "action": "keep"}],
    }


def rbac(namespaces: Sequence[str] = names.DCGM_NAMESPACES) -> list[dict[str, Any]]:
    """A Role + RoleBinding per exporter namespace: Prometheus's ServiceAccount may list its pods."""
    return pod_reader_rbac(names.PROMETHEUS_DCGM_ROLE, namespaces)


def objects(namespaces: Sequence[str] = names.DCGM_NAMESPACES) -> list[dict[str, Any]]:
    """What deploy/ holds besides the job: Prometheus's egress to the exporter pods."""
    return [prometheus_egress(names.PROMETHEUS_DCGM_POLICY, namespaces, ports=[names.DCGM_PORT])]


def monitors(namespaces: Sequence[str] = names.DCGM_NAMESPACES) -> list[dict[str, Any]]:
    """kube-prometheus: a ServiceMonitor for the GPU Operator's Service, a PodMonitor for the Helm chart's pods."""
    labels = names.labels("monitoring")
    keep = {"sourceLabels": ["__name__"], "regex": "DCGM_FI_.+", "action": "keep"}
    return [
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "attnload-dcgm-exporter", "namespace": names.NAMESPACE, "labels": labels},
            "spec": {
                "namespaceSelector": {"matchNames": list(namespaces)},
                "selector": {"matchLabels": {"app": APP_LABELS["app"]}},
                "endpoints": [
                    {
                        "port": "gpu-metrics",
                        "path": "/metrics",
                        "interval": "5s",
                        "honorLabels": True,
                        "metricRelabelings": [dict(keep)],
                    }
                ],
            },
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": {"name": "attnload-dcgm-exporter-chart", "namespace": names.NAMESPACE, "labels": labels},
            "spec": {
                "namespaceSelector": {"matchNames": list(namespaces)},
                "selector": {"matchLabels": {"app.kubernetes.io/name": APP_LABELS["app.kubernetes.io/name"]}},
                "podMetricsEndpoints": [
                    {
                        "port": "metrics",
                        "path": "/metrics",
                        "interval": "5s",
                        "honorLabels": True,
                        "metricRelabelings": [dict(keep)],
                    }
                ],
            },
        },
    ]
