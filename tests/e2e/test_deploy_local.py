"""deploy/'s pods, run as local processes, form a working system.

A miniature kubelet: each Deployment's containers run with the manifest's command, args
and env; ConfigMap volumes become files in a temp dir and emptyDirs become temp dirs;
Service names (and 0.0.0.0) map to 127.0.0.1 and every well-known port to a free one,
in args, env and mounted config alike. Readiness comes from the manifests' own probes.
Then: workers connect to the master, the sim answers, Prometheus scrapes both targets,
a test runs through the master's /swarm and its results file appears (and is listed by
the results sidecar that `attnload cluster results` reads).

Deviations from the cluster, on purpose: ATTNLOAD_STAGE_DURATION is shortened so the
shape ends in seconds; Grafana (no local binary) and the optional Secret are left out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from attnload.cluster import manifests, names
from helpers import ROOT, free_port

VENV_BIN = Path(sys.executable).parent
STAGE_DURATION = "4s"
SKIP = {names.GRAFANA_DEPLOYMENT}
BINARIES = {
    "attnload": str(VENV_BIN / "attnload"),
    "locust": str(VENV_BIN / "locust"),
    "python3": sys.executable,
    "/bin/prometheus": shutil.which("prometheus") or "prometheus",
}
IMAGE_PATHS = {"/app/locustfiles": str(ROOT / "locustfiles")}


@dataclass
class Cluster:
    """Local stand-ins for Services, volumes and pods."""

    tmp: Path
    objects: list[dict[str, Any]]
    ports: dict[int, int] = field(default_factory=dict)
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for obj in self.objects:
            if obj["kind"] == "Service":
                for port in obj["spec"]["ports"]:
                    self.ports.setdefault(int(port["port"]), free_port())
        self.services = [o["metadata"]["name"] for o in self.objects if o["kind"] == "Service"]

    def rewrite(self, text: str, paths: dict[str, str] | None = None) -> str:
        text = re.sub(r"\b(" + "|".join(map(re.escape, self.services)) + r")\b(?!-)", "127.0.0.1", text)
        text = text.replace("0.0.0.0", "127.0.0.1")
        text = re.sub(
            r"(?<![\d.])(" + "|".join(map(str, self.ports)) + r")(?![\d.])",
            lambda m: str(self.ports[int(m.group(1))]),
            text,
        )
        if paths:  # one pass, whole absolute paths only: a temp dir under /tmp must not be rewritten again
            alternation = "|".join(re.escape(p) for p in sorted(paths, key=len, reverse=True))
            text = re.sub(r"(?<![\w/.-])(" + alternation + r")(?=/|$|\s|\")", lambda m: paths[m.group(1)], text)
        return text

    def pod_discovery(self, text: str) -> str:
        """Stand in for the API server: Kubernetes SD (role: pod) becomes static targets, one per
        declared container port of every Deployment's pod, with the labels SD would attach
        (the system's Prometheus may be built without Kubernetes SD, as Debian's is)."""
        config = yaml.safe_load(text)
        for job in config["scrape_configs"]:
            for sd in job.pop("kubernetes_sd_configs", []):
                assert sd["role"] == "pod"
                job.setdefault("static_configs", []).extend(
                    self._pod_target(o, int(p["containerPort"]))
                    for o in self.objects
                    if o["kind"] == "Deployment" and o["metadata"]["namespace"] in sd["namespaces"]["names"]
                    for c in o["spec"]["template"]["spec"]["containers"]
                    for p in c.get("ports", [])
                )
        return str(yaml.safe_dump(config, sort_keys=False))

    @staticmethod
    def _pod_target(dep: dict[str, Any], port: int) -> dict[str, Any]:
        meta = dep["spec"]["template"]["metadata"]
        labels = {
            "__meta_kubernetes_namespace": dep["metadata"]["namespace"],
            "__meta_kubernetes_pod_name": f"{dep['metadata']['name']}-0",
            "__meta_kubernetes_pod_ip": "127.0.0.1",
            "__meta_kubernetes_pod_phase": "Running",
        }
        for prefix, items in (("label", meta.get("labels") or {}), ("annotation", meta.get("annotations") or {})):
            for key, value in items.items():
                labels[f"__meta_kubernetes_pod_{prefix}_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)] = str(value)
        return {"targets": [f"127.0.0.1:{port}"], "labels": labels}

    def config_map(self, name: str) -> dict[str, str]:
        obj = next(o for o in self.objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name)
        return dict(obj["data"])

    def start(self, dep: dict[str, Any], replica: int) -> dict[str, str]:
        """Start one pod's containers; returns its mount-path mapping."""
        pod = dep["spec"]["template"]["spec"]
        pod_dir = self.tmp / f"{dep['metadata']['name']}-{replica}"
        volumes: dict[str, Path] = {}
        for vol in pod.get("volumes", []):
            path = pod_dir / "volumes" / vol["name"]
            path.mkdir(parents=True)
            if "configMap" in vol:
                for key, value in self.config_map(vol["configMap"]["name"]).items():
                    if key == "prometheus.yml":
                        value = self.pod_discovery(value)
                    (path / key).write_text(self.rewrite(value), encoding="utf-8")
            volumes[vol["name"]] = path
        paths = dict(IMAGE_PATHS)
        for c in pod["containers"]:
            for mount in c.get("volumeMounts", []):
                paths[mount["mountPath"]] = str(
                    volumes[mount["volumeName"] if "volumeName" in mount else mount["name"]]
                )
        for c in pod["containers"]:
            # The local binary's own path (maybe under /tmp, like a clone) is never a pod path to remap.
            argv = [
                BINARIES.get(c["command"][0], c["command"][0]),
                *(self.rewrite(a, paths) for a in [*c["command"][1:], *c.get("args", [])]),
            ]
            env = {
                "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
                "HOME": str(pod_dir),
                "PYTHONUNBUFFERED": "1",
                "ATTNLOAD_RESULTS": paths.get(names.RESULTS_DIR, str(pod_dir)),
            }  # the Dockerfile's ENV
            for item in c.get("env", []):
                if "value" in item:
                    env[item["name"]] = self.rewrite(str(item["value"]), paths)
            if "ATTNLOAD_STAGE_DURATION" in env:
                env["ATTNLOAD_STAGE_DURATION"] = STAGE_DURATION
            log = pod_dir / f"{c['name']}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    argv, env=env, cwd=pod_dir, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            self.procs.append((f"{pod_dir.name}/{c['name']}", proc, log))
        return paths

    def probe(self, c: dict[str, Any], paths: dict[str, str]) -> bool:
        probe = c.get("readinessProbe") or {}
        if "httpGet" in probe:
            port = probe["httpGet"]["port"]
            if isinstance(port, str):
                port = next(p["containerPort"] for p in c["ports"] if p["name"] == port)
            return http_ok(f"http://127.0.0.1:{self.ports.get(int(port), port)}{probe['httpGet']['path']}")
        if "exec" in probe:
            command = probe["exec"]["command"]
            argv = [BINARIES.get(command[0], command[0]), *(self.rewrite(a, paths) for a in command[1:])]
            return subprocess.run(argv, capture_output=True, timeout=10).returncode == 0
        return True

    def assert_alive(self) -> None:
        for name, proc, log in self.procs:
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited {proc.returncode}:\n{tail(log)}")

    def stop(self) -> None:
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc, _ in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)

    def url(self, service_port: int, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[service_port]}{path}"


def tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:]) if log.exists() else "(no log)"


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as reply:
            return bool(200 <= reply.status < 400)
    except (urllib.error.URLError, OSError):
        return False


def get_json(url: str, form: dict[str, str] | None = None) -> Any:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    with urllib.request.urlopen(url, data=data, timeout=10) as reply:
        return json.load(reply)


def wait_for(what: str, check: Any, cluster: Cluster, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        cluster.assert_alive()
        try:
            value = check()
        except (urllib.error.URLError, OSError, KeyError, ValueError, IndexError):
            value = None
        if value:
            return value
        time.sleep(0.5)
    logs = "\n".join(f"--- {n}\n{tail(log)}" for n, _, log in cluster.procs)
    raise AssertionError(f"timed out waiting for {what}\n{logs}")


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, manifests.load(ROOT / "deploy"))
    try:
        yield c
    finally:
        c.stop()


def test_deploy_pods_as_local_processes_form_a_working_system(cluster: Cluster) -> None:
    deployments = {o["metadata"]["name"]: o for o in cluster.objects if o["kind"] == "Deployment"}
    order = [names.SIM_DEPLOYMENT, names.MASTER_DEPLOYMENT, names.WORKER_DEPLOYMENT, names.PROMETHEUS_DEPLOYMENT]
    assert set(order) == set(deployments) - SKIP
    for name in order:
        dep = deployments[name]
        for replica in range(dep["spec"].get("replicas", 1)):
            paths = cluster.start(dep, replica)
            for c in dep["spec"]["template"]["spec"]["containers"]:
                wait_for(f"{name}/{c['name']} readiness probe", lambda c=c, p=paths: cluster.probe(c, p), cluster)

    workers = deployments[names.WORKER_DEPLOYMENT]["spec"]["replicas"]
    stats_url = cluster.url(names.WEB_PORT, "/stats/requests")
    wait_for(f"{workers} workers connected", lambda: len(get_json(stats_url).get("workers") or []) == workers, cluster)
    assert http_ok(cluster.url(names.SIM_PORT, "/v1/models"))

    reply = get_json(cluster.url(names.WEB_PORT, "/swarm"), {"user_count": "4", "spawn_rate": "4"})
    assert reply.get("success"), reply

    prom = cluster.url(names.PROMETHEUS_PORT, "/api/v1")
    seen: dict[str, str] = {}

    def targets_up() -> bool:
        for t in get_json(f"{prom}/targets")["data"]["activeTargets"]:
            seen[t["scrapeUrl"]] = f"{t['health']} {t.get('lastError', '')}"
        return all(v.startswith("up") for v in seen.values()) and len(seen) >= 3

    wait_for(f"every scrape target up (last: {seen})", targets_up, cluster, timeout_s=60)
    # The sim is found by pod discovery, and scraped once. (Its job label reads 127.0.0.1 here: the
    # Service-name rewrite above also hits the relabel rule's replacement "attnload-sim".)
    for expr in (
        f'count(up{{pod="{names.SIM_DEPLOYMENT}-0"}} == 1)',
        f'count(up{{instance="127.0.0.1:{cluster.ports[names.SIM_PORT]}"}})',
    ):
        assert get_json(f"{prom}/query?query={urllib.parse.quote(expr)}")["data"]["result"][0]["value"][1] == "1"
    query = urllib.parse.quote("sum(attnload_requests_total)")
    wait_for(
        "attnload_requests_total scraped from the master",
        lambda: float(get_json(f"{prom}/query?query={query}")["data"]["result"][0]["value"][1]) > 0,
        cluster,
        timeout_s=90,
    )

    # Stopping (like `attnload cluster stop`) makes the master write its results.
    get_json(cluster.url(names.WEB_PORT, "/stop"), {})
    master_log = next(log for n, _, log in cluster.procs if n.startswith(names.MASTER_DEPLOYMENT))
    results_dir = master_log.parent / "volumes" / "results"
    result_file = wait_for("results JSON", lambda: next(iter(results_dir.glob("*.json")), None), cluster)
    data = json.loads(result_file.read_text())
    assert data["schema"] == "attnload.results/v1"
    assert {m["attention"] for m in data["models"]} == {"GQA", "MLA"}
    with urllib.request.urlopen(cluster.url(names.RESULTS_PORT, "/"), timeout=5) as listing:
        assert result_file.name in listing.read().decode()
