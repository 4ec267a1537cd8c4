"""Every name and port the deploy/ manifests, the generator and ``attnload cluster`` share.

Spelled once here so a rename breaks a test instead of a cluster; tests/test_deploy.py
checks the YAML in deploy/ against these.
"""

from __future__ import annotations

NAMESPACE = "attnload"
PART_OF = "attnload"

MASTER_DEPLOYMENT = MASTER_SERVICE = "attnload-master"
WORKER_DEPLOYMENT = "attnload-worker"
SIM_DEPLOYMENT = SIM_SERVICE = "attnload-sim"
PROMETHEUS_DEPLOYMENT = PROMETHEUS_SERVICE = "attnload-prometheus"
GRAFANA_DEPLOYMENT = GRAFANA_SERVICE = "attnload-grafana"

CONFIG_MAP = "attnload-config"
SECRET = "attnload-api-keys"
PROMETHEUS_CONFIG_MAP = "attnload-prometheus"
GRAFANA_DATASOURCES_MAP = "attnload-grafana-datasources"
GRAFANA_PROVIDERS_MAP = "attnload-grafana-dashboard-providers"
GRAFANA_DASHBOARDS_MAP = "attnload-grafana-dashboards"
GRAFANA_SECRET = "attnload-grafana"  # key admin-password; `cluster up` generates it if absent
GRAFANA_SECRET_KEY = "admin-password"
APISERVER_POLICY = "attnload-master-apiserver"  # the NetworkPolicy `cluster up` points at the API server
APISERVER_PLACEHOLDER_CIDR = "192.0.2.1/32"  # TEST-NET-1: admits nobody until `cluster up` or you set it
# Prometheus's pod discovery of model servers: its ServiceAccount may get/list/watch pods
# in these namespaces, its scrape job `model-servers` looks only there, and its NetworkPolicies let it
# reach them. The slot for real vLLM/SGLang namespaces: `python -m attnload.cluster.generate
# --model-server-namespace NS` (docs/kubernetes.md, "Model servers by pod discovery").
MODEL_SERVER_NAMESPACES: tuple[str, ...] = (NAMESPACE,)
MODEL_SERVERS_JOB = "model-servers"
PROMETHEUS_SERVICE_ACCOUNT = "attnload-prometheus"
PROMETHEUS_DISCOVERY_ROLE = "attnload-prometheus-discovery"  # Role + RoleBinding, one per namespace
PROMETHEUS_APISERVER_POLICY = "attnload-prometheus-apiserver"  # egress to the API server; `cluster up` fills it
PROMETHEUS_MODEL_SERVERS_POLICY = "attnload-prometheus-model-servers"  # egress to the other namespaces' pods
APISERVER_PORTS = (443, 6443)  # the API server's own port behind the `kubernetes` Service (managed; kubeadm/kind)

GENERATED_CONFIG_FILE = "10-config.generated.yaml"
GENERATED_PROMETHEUS_FILE = "40-prometheus-config.generated.yaml"
GENERATED_GRAFANA_FILE = "50-grafana-config.generated.yaml"
EXTRAS_DIR = "extras"  # deploy/extras/: not read by `kubectl apply -f deploy/` (not recursive)
GENERATED_RULES_FILE = "extras/kube-prometheus-rules.generated.yaml"
GENERATED_DASHBOARDS_FILE = "extras/kube-prometheus-dashboards.generated.yaml"

MASTER_PORT = 5557  # Locust master bind port (workers connect here)
MASTER_PORT_2 = 5558  # the second Locust port older releases and docs expect open
WEB_PORT = 8089  # Locust web UI and API (/swarm, /stop, /stats/requests)
RESULTS_PORT = 8090  # read-only file listing of the master's results directory
METRICS_PORT = 9646  # attnload Prometheus /metrics on the master
SIM_PORT = 8000
PROMETHEUS_PORT = 9090
GRAFANA_PORT = 3000

PROMETHEUS_URL = f"http://{PROMETHEUS_SERVICE}:{PROMETHEUS_PORT}"
PROMETHEUS_CONFIG_DIR = "/etc/prometheus"
GRAFANA_DASHBOARD_DIR = "/etc/grafana/dashboards"
CONFIG_DIR = "/etc/attnload"
RESULTS_DIR = "/results"


def labels(component: str, name: str = "attnload") -> dict[str, str]:
    """The app.kubernetes.io labels every object carries."""
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "attnload",
    }


# dcgm-exporter: where deploy/'s Prometheus looks for NVIDIA's GPU exporter. The GPU
# Operator runs it as the DaemonSet `nvidia-dcgm-exporter` (pod label app=nvidia-dcgm-exporter) in
# `gpu-operator`; the standalone Helm chart labels it app.kubernetes.io/name=dcgm-exporter. Other
# namespaces: `python -m attnload.cluster.generate --dcgm-namespace NS` (docs/gpu-metrics.md).
DCGM_NAMESPACES: tuple[str, ...] = ("gpu-operator",)
DCGM_JOB = "dcgm-exporter"
DCGM_PORT = 9400
PROMETHEUS_DCGM_ROLE = "attnload-prometheus-dcgm"  # Role + RoleBinding per dcgm namespace (pods)
PROMETHEUS_DCGM_POLICY = "attnload-prometheus-dcgm"  # egress Prometheus -> dcgm-exporter pods, TCP 9400
GENERATED_DCGM_MONITOR_FILE = "extras/dcgm-exporter-monitor.generated.yaml"
GPU_OPERATOR_DIR = "gpu-operator"
GENERATED_DCGM_RBAC_FILE = f"{GPU_OPERATOR_DIR}/dcgm-exporter-rbac.generated.yaml"
"""Objects in the exporter's namespace, so not in deploy/ (whose objects all live in attnload and must apply
on a cluster without the GPU Operator): `kubectl apply -f deploy/gpu-operator/` where it runs."""
