"""Prometheus finds the model servers by pod annotation: the scrape job, RBAC and egress it needs.

Real vLLM/SGLang servers come and go with their Deployments, so a static target list in
deploy/ would always be stale. The in-cluster Prometheus instead watches pods (Kubernetes
service discovery, ``role: pod``) in the listed namespaces and scrapes those annotated the
usual way::

    prometheus.io/scrape: "true"     # required
    prometheus.io/port: "8000"       # the metrics port (default: each declared container port)
    prometheus.io/path: /metrics     # default /metrics

That needs three things the rest of deploy/ never grants, all written here from one
namespace list so they cannot disagree: the job itself, a ServiceAccount allowed to
get/list/watch pods in exactly those namespaces (a Role + RoleBinding per namespace, not a
ClusterRole: Prometheus sees no other namespace), and NetworkPolicy egress to the pods of
the namespaces other than attnload's own (attnload's own pods keep their per-port rules in
05-network-policy.yaml; the API server's egress is there too, next to the master's).

The simulator is annotated as well and found by this job, relabelled to ``job="attnload-sim"``;
deploy/ has no static sim job, so it is scraped once and the dashboards' sums stay right.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnload.cluster import names

# The simulator pod (found by discovery like a real server) keeps the job name the dashboards,
# the local stack and the kube-prometheus ServiceMonitor give it.
SIM_JOB = "attnload-sim"
_A = "__meta_kubernetes_pod_annotation_prometheus_io_"

# Keep only the series a dashboard or attnload reads: the servers' per-model ones (vLLM and
# SGLang label every engine series with model_name) and the simulator's attnload_sim_* (label
# `model`). A real vLLM also exports hundreds of python_*/process_*/http_* series nobody reads.
KEEP_SERIES = {"source_labels": ["__name__", "model_name"], "regex": "attnload_sim_.+;.*|.+;.+", "action": "keep"}


def _relabel() -> list[dict[str, Any]]:
    return [
        {"source_labels": [f"{_A}scrape"], "regex": "true", "action": "keep"},
        # A finished or not-yet-running pod has no server to scrape.
        {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Pending|Succeeded|Failed", "action": "drop"},
        {"source_labels": [f"{_A}path"], "regex": "(.+)", "target_label": "__metrics_path__", "action": "replace"},
        {"source_labels": [f"{_A}scheme"], "regex": "(https?)", "target_label": "__scheme__", "action": "replace"},
        # prometheus.io/port replaces the port; the pod IP is bracketed when it is IPv6.
        {
            "source_labels": [f"{_A}port", "__meta_kubernetes_pod_ip"],
            "regex": "(\\d+);(([A-Fa-f0-9]{1,4}::?){1,7}[A-Fa-f0-9]{1,4})",
            "replacement": "[$2]:$1",
            "target_label": "__address__",
            "action": "replace",
        },
        {
            "source_labels": [f"{_A}port", "__meta_kubernetes_pod_ip"],
            "regex": "(\\d+);((([0-9]+?)(\\.|$)){4})",
            "replacement": "$2:$1",
            "target_label": "__address__",
            "action": "replace",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace", "action": "replace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod", "action": "replace"},
        {
            "source_labels": [
                "__meta_kubernetes_pod_label_app_kubernetes_io_part_of",
                "__meta_kubernetes_pod_label_app_kubernetes_io_component",
            ],
            "regex": f"{names.PART_OF};sim",
            "replacement": SIM_JOB,
            "target_label": "job",
            "action": "replace",
        },
    ]


def scrape_job(namespaces: Sequence[str] = names.MODEL_SERVER_NAMESPACES) -> dict[str, Any]:
    """The ``model-servers`` job: annotated pods of ``namespaces``, the simulator's as ``attnload-sim``."""
    return {
        "job_name": names.MODEL_SERVERS_JOB,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": list(namespaces)}}],
        "relabel_configs": _relabel(),
        "metric_relabel_configs": [dict(KEEP_SERIES)],
    }


def rbac(namespaces: Sequence[str] = names.MODEL_SERVER_NAMESPACES) -> list[dict[str, Any]]:
    """Prometheus's ServiceAccount, and a Role + RoleBinding to read pods in each namespace."""
    labels = names.labels("prometheus", "prometheus")
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": names.PROMETHEUS_SERVICE_ACCOUNT, "namespace": names.NAMESPACE, "labels": labels},
            # Only the Prometheus pod mounts the token (41-prometheus.yaml); nothing else gets one by default.
            "automountServiceAccountToken": False,
        }
    ]
    return objects + pod_reader_rbac(names.PROMETHEUS_DISCOVERY_ROLE, namespaces)


def egress_policy(namespaces: Sequence[str] = names.MODEL_SERVER_NAMESPACES) -> dict[str, Any] | None:
    """Prometheus -> every pod of the other listed namespaces, any port; None when there are none.

    Any port, because the annotation, not the policy, names the metrics port, and it differs per
    server (vLLM 8000, SGLang 30000, a sidecar's own). Narrow it with a patch if you know them.
    """
    others = [n for n in namespaces if n != names.NAMESPACE]
    if not others:
        return None
    return prometheus_egress(names.PROMETHEUS_MODEL_SERVERS_POLICY, others)


def objects(namespaces: Sequence[str] = names.MODEL_SERVER_NAMESPACES) -> list[dict[str, Any]]:
    """Everything besides the scrape job: RBAC, then the egress policy when one is needed."""
    policy = egress_policy(namespaces)
    return rbac(namespaces) + ([policy] if policy else [])


def pod_reader_rbac(role: str, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """A Role ``role`` + RoleBinding per namespace: Prometheus's ServiceAccount may get, list and watch
    its pods (and nothing else), which is all pod discovery needs."""
    labels = names.labels("prometheus", "prometheus")
    out: list[dict[str, Any]] = []
    for namespace in namespaces:
        meta = {"name": role, "namespace": namespace, "labels": labels}
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": meta,
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
            }
        )
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": dict(meta),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [
                    {"kind": "ServiceAccount", "name": names.PROMETHEUS_SERVICE_ACCOUNT, "namespace": names.NAMESPACE}
                ],
            }
        )
    return out


def prometheus_egress(name: str, namespaces: Sequence[str], ports: Sequence[int] = ()) -> dict[str, Any]:
    """A NetworkPolicy ``name``: Prometheus's pod may open connections to the pods of ``namespaces``
    (on ``ports`` only, when given)."""
    rule: dict[str, Any] = {
        "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": n}}} for n in namespaces]
    }
    if ports:
        rule["ports"] = [{"protocol": "TCP", "port": port} for port in ports]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": names.NAMESPACE, "labels": names.labels("network")},
        "spec": {
            "podSelector": {
                "matchLabels": {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/component": "prometheus"}
            },
            "policyTypes": ["Egress"],
            "egress": [rule],
        },
    }
