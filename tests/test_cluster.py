"""`attnload cluster` against an HTTP fake of the Kubernetes API.

The fake speaks the real paths and JSON (server-side apply PATCHes, the Deployment list,
the scale subresource, namespace delete, the service proxy to the Locust master) and
records every call, so the tests assert exactly what the real API server would receive.
It is pointed to by a temporary kubeconfig, the way users point at kind.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from attnload.cluster import manifests
from attnload.commands.cli import main

ROOT = Path(__file__).resolve().parents[1]
NS_PATH = "/api/v1/namespaces/attnload"
PROXY = f"{NS_PATH}/services/attnload-master:web/proxy"
RESULTS_PROXY = f"{NS_PATH}/services/attnload-master:results/proxy"
APPLY_QUERY = "?fieldManager=attnload&force=true"
SLICES = (
    "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"  # the API server's addresses
    "?labelSelector=kubernetes.io/service-name%3Dkubernetes"
)


def _resources(*kinds: tuple[str, str, bool]) -> dict[str, Any]:
    listed = [
        {"name": plural, "kind": kind, "namespaced": namespaced, "verbs": ["get", "patch"]}
        for kind, plural, namespaced in kinds
    ]
    return {"kind": "APIResourceList", "resources": listed}


DISCOVERY = {
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/api/v1": _resources(
        ("Namespace", "namespaces", False),
        ("ConfigMap", "configmaps", True),
        ("Secret", "secrets", True),
        ("Service", "services", True),
        ("ServiceAccount", "serviceaccounts", True),
        ("PersistentVolumeClaim", "persistentvolumeclaims", True),
        ("Pod", "pods", True),
    ),
    "/apis/apps/v1": _resources(("Deployment", "deployments", True), ("Scale", "deployments/scale", True)),
    "/apis/batch/v1": _resources(("Job", "jobs", True)),
    "/apis/networking.k8s.io/v1": _resources(("NetworkPolicy", "networkpolicies", True)),
    "/apis/rbac.authorization.k8s.io/v1": _resources(
        ("Role", "roles", True), ("RoleBinding", "rolebindings", True), ("ClusterRole", "clusterroles", False)
    ),
}
"""What a real API server's discovery answers for the group-versions deploy/ uses (kubectl api-resources)."""
OPERATOR = {
    "/apis/monitoring.coreos.com/v1": _resources(
        ("ServiceMonitor", "servicemonitors", True),
        ("PodMonitor", "podmonitors", True),
        ("PrometheusRule", "prometheusrules", True),
    )
}
"""The Prometheus Operator's CRDs, served only when the fake cluster "has" the operator."""


class FakeKube:
    """In-memory API server: objects by path, discovery, plus a scripted Locust master behind the proxy."""

    def __init__(self) -> None:
        self.discovery: dict[str, dict[str, Any]] = dict(DISCOVERY)
        self.objects: dict[str, dict[str, Any]] = {}
        self.discovered: list[str] = []
        """Discovery GETs (``/api/v1``, ``/apis/G/V``), apart from ``calls``: each group-version once per run."""
        self.calls: list[tuple[str, str]] = []
        self.bodies: list[tuple[str, str, str, bytes]] = []
        self.auth: set[str] = set()
        self.results = {"20260101-000000.json": '{"schema": "attnload.results/v1", "models": []}'}

    def handle(self, method: str, target: str, content_type: str, body: bytes) -> tuple[int, str, str]:
        path = urlsplit(target).path
        if method == "GET" and re.fullmatch(r"/api(/v1)?|/apis(/[^/]+/[^/]+)?", path):  # discovery, kept apart
            self.discovered.append(path)
            if path in self.discovery:
                return 200, "application/json", json.dumps(self.discovery[path])
            return 404, "application/json", json.dumps({"kind": "Status", "code": 404, "reason": "NotFound"})
        self.calls.append((method, target))
        self.bodies.append((method, target, content_type, body))
        if path.startswith(PROXY):
            return self._master(method, path[len(PROXY) :], body)
        if path.startswith(RESULTS_PROXY):
            return self._results(path[len(RESULTS_PROXY) :])
        if method == "PATCH" and path.endswith("/scale") and path[: -len("/scale")] in self.objects:
            dep = self.objects[path[: -len("/scale")]]
            dep["spec"]["replicas"] = json.loads(body)["spec"]["replicas"]
            dep["metadata"]["generation"] += 1
            return 200, "application/json", json.dumps({"kind": "Scale", "spec": dep["spec"]})
        if method == "PATCH" and content_type == "application/apply-patch+yaml":
            obj = json.loads(body)
            old = self.objects.get(path)
            obj["metadata"]["generation"] = old["metadata"]["generation"] + 1 if old else 1
            self.objects[path] = obj
            return 200 if old else 201, "application/json", json.dumps(obj)
        if method == "GET" and path == "/apis/apps/v1/namespaces/attnload/deployments":
            items = [self._with_status(o) for p, o in self.objects.items() if "/deployments/" in p]
            return 200, "application/json", json.dumps({"kind": "DeploymentList", "items": items})
        if method == "DELETE" and path == NS_PATH and path in self.objects:
            self.objects = {p: o for p, o in self.objects.items() if "/namespaces/attnload" not in p}
            return 200, "application/json", json.dumps({"kind": "Status", "status": "Success"})
        if method == "GET" and path in self.objects:
            return 200, "application/json", json.dumps(self.objects[path])

        return (
            404,
            "application/json",
            json.dumps({"kind": "Status", "code": 404, "reason": "NotFound", "message": f"{path} not found"}),
        )

    @staticmethod
    def _with_status(dep: dict[str, Any]) -> dict[str, Any]:
        replicas = dep["spec"].get("replicas", 1)
        return {
            **dep,
            "status": {
                "observedGeneration": dep["metadata"]["generation"],
                "replicas": replicas,
                "readyReplicas": replicas,
                "updatedReplicas": replicas,
            },
        }

    def _master(self, method: str, path: str, body: bytes) -> tuple[int, str, str]:
        if method == "POST" and path == "/swarm":
            form = dict(parse_qsl(body.decode()))
            msg = f"Swarming started using shape class 'Default' ({form['user_count']} users)"
            return 200, "application/json", json.dumps({"success": True, "message": msg})
        if method == "POST" and path == "/stop":
            return 200, "application/json", json.dumps({"success": True, "message": "Test stopped"})
        if path == "/stats/requests":
            return (
                200,
                "application/json",
                json.dumps(
                    {
                        "state": "stopped",
                        "user_count": 0,
                        "total_rps": 0.0,
                        "fail_ratio": 0.0,
                        "workers": [{"id": "w1"}, {"id": "w2"}],
                    }
                ),
            )
        return 404, "text/plain", "no such page"

    def _results(self, path: str) -> tuple[int, str, str]:
        if path in ("", "/"):
            links = "".join(f'<li><a href="{name}">{name}</a></li>' for name in self.results)
            return 200, "text/html", f"<html><body><ul>{links}</ul></body></html>"
        name = path.lstrip("/")
        if name in self.results:
            return 200, "application/json", self.results[name]
        return 404, "text/plain", "File not found"


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKube]:
    api = FakeKube()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            api.auth.add(self.headers.get("Authorization", ""))
            status, ctype, text = api.handle(self.command, self.path, self.headers.get("Content-Type", ""), body)
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "http://127.0.0.1:{server.server_port}"}}}}]
users: [{{name: fake, user: {{token: fake-token}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]
current-context: fake
""")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.chdir(ROOT)
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _apply_path(obj: dict[str, Any]) -> str:
    kind, name = obj["kind"], obj["metadata"]["name"]
    if kind == "Namespace":
        return f"/api/v1/namespaces/{name}{APPLY_QUERY}"
    plural = {
        "ConfigMap": "configmaps",
        "Service": "services",
        "Deployment": "deployments",
        "Secret": "secrets",
        "NetworkPolicy": "networkpolicies",
        "ServiceAccount": "serviceaccounts",
        "Role": "roles",
        "RoleBinding": "rolebindings",
    }[kind]
    prefix = {
        "Deployment": "/apis/apps/v1",
        "NetworkPolicy": "/apis/networking.k8s.io/v1",
        "Role": "/apis/rbac.authorization.k8s.io/v1",
        "RoleBinding": "/apis/rbac.authorization.k8s.io/v1",
    }.get(kind, "/api/v1")
    return f"{prefix}/namespaces/attnload/{plural}/{name}{APPLY_QUERY}"


def test_up_applies_every_manifest_in_order_then_waits(fake: FakeKube, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "up"]) == 0
    objects = manifests.load(ROOT / "deploy")
    grafana = {"kind": "Secret", "metadata": {"name": "attnload-grafana"}}
    expected = (
        [("GET", f"{NS_PATH}/secrets/attnload-grafana"), ("GET", SLICES)]
        + [("PATCH", _apply_path(o)) for o in [objects[0], grafana, *objects[1:]]]
        + [("GET", "/apis/apps/v1/namespaces/attnload/deployments")]
    )
    assert fake.calls == expected
    assert fake.calls[2] == ("PATCH", "/api/v1/namespaces/attnload" + APPLY_QUERY)  # after the two GETs
    assert ("PATCH", "/apis/apps/v1/namespaces/attnload/deployments/attnload-worker" + APPLY_QUERY) in fake.calls
    assert fake.auth == {"Bearer fake-token"}
    assert "attnload is up" in capsys.readouterr().out


def test_up_overrides_image_workers_config_and_key(fake: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAOTOKEN_API_KEY", "sk-test-secret-value-123")
    assert (
        main(
            [
                "cluster",
                "up",
                "--workers",
                "5",
                "--image",
                "reg.example/attnload:1",
                "--config",
                "benchmark_config.json",
                "--shape",
                "concurrency:1,8",
                "--api-key-env",
                "TAOTOKEN_API_KEY",
            ]
        )
        == 0
    )
    assert fake.calls[3] == ("PATCH", "/api/v1/namespaces/attnload/secrets/attnload-api-keys" + APPLY_QUERY)
    secret = fake.objects["/api/v1/namespaces/attnload/secrets/attnload-api-keys"]
    assert secret["stringData"] == {"TAOTOKEN_API_KEY": "sk-test-secret-value-123"}
    worker = fake.objects["/apis/apps/v1/namespaces/attnload/deployments/attnload-worker"]
    assert worker["spec"]["replicas"] == 5
    container = worker["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "reg.example/attnload:1"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["ATTNLOAD_CONFIG"] == "/etc/attnload/benchmark_config.json"
    assert env["ATTNLOAD_SHAPE"] == "concurrency:1,8"


def test_up_rejects_a_config_not_in_the_configmap(fake: FakeKube, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "up", "--config", "nope.json"]) == 2
    assert "nope.json is not in ConfigMap attnload-config" in capsys.readouterr().err
    assert fake.calls == []


def test_scale_patches_the_scale_subresource(fake: FakeKube) -> None:
    assert main(["cluster", "up", "--no-wait"]) == 0
    fake.calls.clear()
    fake.bodies.clear()
    assert main(["cluster", "scale", "7"]) == 0
    assert fake.calls == [
        ("PATCH", "/apis/apps/v1/namespaces/attnload/deployments/attnload-worker/scale"),
        ("GET", "/apis/apps/v1/namespaces/attnload/deployments"),
    ]
    method, target, ctype, body = fake.bodies[0]
    assert ctype == "application/merge-patch+json" and json.loads(body) == {"spec": {"replicas": 7}}


def test_down_deletes_the_namespace_and_waits(fake: FakeKube, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "up", "--no-wait"]) == 0
    fake.calls.clear()
    assert main(["cluster", "down"]) == 0
    assert fake.calls == [("DELETE", NS_PATH), ("GET", NS_PATH)]
    assert "namespace attnload deleted" in capsys.readouterr().out
    assert main(["cluster", "down"]) == 0  # idempotent
    assert "does not exist" in capsys.readouterr().out


def test_run_stop_status_results_use_the_service_proxy(
    fake: FakeKube, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "up", "--no-wait"]) == 0
    fake.calls.clear()
    fake.bodies.clear()
    assert main(["cluster", "run", "--users", "64", "--spawn-rate", "16", "--run-time", "2m"]) == 0
    assert fake.calls == [("POST", f"{PROXY}/swarm")]
    form = dict(parse_qsl(fake.bodies[0][3].decode()))
    assert form == {"user_count": "64", "spawn_rate": "16.0", "run_time": "2m"}
    assert main(["cluster", "stop"]) == 0
    assert fake.calls[-1] == ("POST", f"{PROXY}/stop")
    assert main(["cluster", "status"]) == 0
    assert "workers=2" in capsys.readouterr().out
    fake.calls.clear()
    assert main(["cluster", "results", "--out", str(tmp_path / "res")]) == 0
    assert fake.calls == [("GET", f"{RESULTS_PROXY}/"), ("GET", f"{RESULTS_PROXY}/20260101-000000.json")]
    saved = json.loads((tmp_path / "res" / "20260101-000000.json").read_text())
    assert saved["schema"] == "attnload.results/v1"


def test_no_cluster_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["cluster", "status"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "attnload cluster: error: no Kubernetes cluster configured: set KUBECONFIG or create "
        "~/.kube/config (kind create cluster)\n"
    )


def test_unreachable_cluster_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("""apiVersion: v1
kind: Config
clusters: [{name: gone, cluster: {server: "http://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: gone, context: {cluster: gone, user: u}}]
current-context: gone
""")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert main(["cluster", "status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnload cluster: error: cannot reach the Kubernetes API at http://127.0.0.1:9")
    assert err.count("\n") == 1


def test_api_errors_are_one_line(fake: FakeKube, capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing deployed: the worker Deployment's scale subresource is a 404.
    assert main(["cluster", "scale", "3"]) == 2
    err = capsys.readouterr().err
    assert "not found: PATCH /apis/apps/v1/namespaces/attnload/deployments/attnload-worker/scale" in err


GRAFANA_SECRET = f"{NS_PATH}/secrets/attnload-grafana"
APISERVER_POLICY = "/apis/networking.k8s.io/v1/namespaces/attnload/networkpolicies/attnload-master-apiserver"


def test_up_generates_the_grafana_password_once_and_never_prints_it(
    fake: FakeKube, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "up", "--no-wait"]) == 0
    password = fake.objects[GRAFANA_SECRET]["stringData"]["admin-password"]
    assert len(password) == 24 and password.isascii() and password != "admin"
    out = capsys.readouterr().out
    assert password not in out
    assert "get secret attnload-grafana -o jsonpath='{.data.admin-password}' | base64 -d" in out
    assert main(["cluster", "up", "--no-wait"]) == 0  # exists now: kept, not replaced
    assert ("PATCH", GRAFANA_SECRET + APPLY_QUERY) not in fake.calls[fake.calls.index(("GET", GRAFANA_SECRET), 3) :]
    assert fake.objects[GRAFANA_SECRET]["stringData"]["admin-password"] == password
    assert "password generated" not in capsys.readouterr().out


def test_up_admits_only_the_api_server_to_the_web_ports(fake: FakeKube, capsys: pytest.CaptureFixture[str]) -> None:
    fake.objects[SLICES.split("?")[0]] = {
        "kind": "EndpointSliceList",
        "items": [
            {"endpoints": [{"addresses": ["172.18.0.2"]}, {"addresses": ["172.18.0.3"]}]},
            {"endpoints": [{"addresses": ["fd00::2"]}]},
        ],
    }
    assert main(["cluster", "up", "--no-wait"]) == 0
    rule = fake.objects[APISERVER_POLICY]["spec"]["ingress"][0]
    assert rule["from"] == [
        {"ipBlock": {"cidr": "172.18.0.2/32"}},
        {"ipBlock": {"cidr": "172.18.0.3/32"}},
        {"ipBlock": {"cidr": "fd00::2/128"}},
    ]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8089}, {"protocol": "TCP", "port": 8090}]
    egress = fake.objects[APISERVER_POLICY.replace("attnload-master-apiserver", "attnload-prometheus-apiserver")]
    assert egress["spec"]["egress"][0]["to"] == rule["from"]  # Prometheus watches pods through the same addresses
    assert "warning" not in capsys.readouterr().out


def test_up_keeps_the_placeholder_when_the_api_server_is_unknown(
    fake: FakeKube, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "up", "--no-wait"]) == 0  # the fake has no EndpointSlices: 404
    assert fake.objects[APISERVER_POLICY]["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "192.0.2.1/32"}}]
    assert "warning: cannot read the API server's addresses" in capsys.readouterr().out


def test_up_with_extras_applies_every_kind_by_discovery(fake: FakeKube, capsys: pytest.CaptureFixture[str]) -> None:
    """Job, ServiceMonitor, PodMonitor, PrometheusRule: no table of kinds, each group-version asked once."""
    fake.discovery.update(OPERATOR)
    assert main(["cluster", "up", "--extras", "--no-wait"]) == 0
    extras = manifests.load(ROOT / "deploy" / "extras")
    kinds = {o["kind"] for o in extras}
    assert {"Job", "ServiceMonitor", "PodMonitor", "PrometheusRule", "PersistentVolumeClaim"} <= kinds
    patched = [target for method, target in fake.calls if method == "PATCH"]
    for obj in extras:
        group = obj["apiVersion"]
        prefix = f"/apis/{group}" if "/" in group else f"/api/{group}"
        plural = next(r["name"] for r in fake.discovery[prefix]["resources"] if r["kind"] == obj["kind"])
        path = f"{prefix}/namespaces/attnload/{plural}/{obj['metadata']['name']}"
        assert path + APPLY_QUERY in patched, path
        assert fake.objects[path]["kind"] == obj["kind"]
    assert sorted(fake.discovered) == sorted(set(fake.discovered))  # cached: one GET per group-version
    assert "/apis/monitoring.coreos.com/v1" in fake.discovered and "/apis/batch/v1" in fake.discovered
    applied = [(m, t, c) for m, t, c, _b in fake.bodies if m == "PATCH" and "/scale" not in t]
    assert all(c == "application/apply-patch+yaml" and "fieldManager=attnload" in t for _m, t, c in applied)
    assert "applied prometheusrule/attnload" in capsys.readouterr().out


def test_up_with_extras_names_a_group_the_cluster_does_not_serve(
    fake: FakeKube, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["cluster", "up", "--extras", "--no-wait"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "does not serve monitoring.coreos.com/v1" in err and "Traceback" not in err


def test_without_the_cluster_extra_the_command_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain install (no kubernetes client): one line naming the extra, exit 2, before any cluster call."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "kubernetes" else real(name, *a))
    assert main(["cluster", "status"]) == 2
    err = capsys.readouterr().err
    assert err == "attnload cluster: error: the Kubernetes client is not installed: pip install 'attnload[cluster]'\n"
