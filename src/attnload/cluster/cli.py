"""``attnload cluster``: the routine parts of a Kubernetes run, without hand-written kubectl.

    attnload cluster up [--workers N --image IMG --config FILE --shape SPEC --api-key-env VAR]
    attnload cluster status | scale N | run [-u/--users N -r/--spawn-rate R -t/--run-time D --wait]
    attnload cluster stop | results [--out DIR] | logs [COMPONENT] | down

``up`` applies deploy/ (server-side apply, namespace first) and waits until every
Deployment is ready; ``run``/``stop`` drive Locust's web API (/swarm, /stop) through the
API server's service proxy; ``results`` copies the master's results files back the same
way; ``down`` deletes the namespace. See kube.py for why the service proxy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections.abc import Callable
from typing import Any

from attnload.cluster import access, manifests, names
from attnload.cluster.args import configure
from attnload.cluster.kube import Kube, NotFound, connect
from attnload.errors import UsageError, register_secret

NS = names.NAMESPACE
__all__ = ["configure", "run"]
_LOCUST_DONE = {"stopped", "ready"}


def run(args: argparse.Namespace) -> int:
    kube = connect(args.kubeconfig, args.context)
    actions: dict[str, Callable[[Kube, argparse.Namespace], int]] = {
        "up": up,
        "status": status,
        "scale": scale,
        "run": start,
        "stop": stop,
        "results": fetch_results,
        "logs": logs,
        "down": down,
    }
    return actions[args.action](kube, args)


# --------------------------------------------------------------------------- up / scale / down


def up(kube: Kube, args: argparse.Namespace) -> int:
    directory = args.manifests or manifests.default_directory()
    print(f"manifests: {directory}")
    objects = manifests.load(directory)
    if args.extras:
        objects += manifests.load(directory / "extras")
    overrides = manifests.Overrides(
        image=args.image,
        workers=args.workers,
        config=args.config,
        shape=args.shape,
        stage_duration=args.stage_duration,
        profile=args.profile,
    )
    manifests.customise(objects, overrides, manifests.config_keys(objects))
    keys = _api_key_secret(args.api_key_env)
    grafana = access.grafana_secret(kube)
    objects[1:1] = [s for s in (keys, grafana) if s is not None]  # after the namespace, before the pods
    cidrs = access.apiserver_cidrs(kube)
    if cidrs:
        access.point_policy_at_apiserver(objects, cidrs)
    else:
        print(
            f"warning: cannot read the API server's addresses; NetworkPolicies {names.APISERVER_POLICY} and "
            f"{names.PROMETHEUS_APISERVER_POLICY} keep their placeholder, so `attnload cluster run` may be refused "
            "and Prometheus may not discover the model servers (docs/kubernetes.md, NetworkPolicy)"
        )
    for obj in objects:
        kube.apply(obj)
        print(f"applied {obj['kind'].lower()}/{obj['metadata']['name']}")
    if grafana is not None:
        print(f"Grafana admin password generated; read it with: {access.READ_PASSWORD}")
    if not args.no_wait:
        wait_ready(kube, args.timeout)
    print(f"attnload is up in namespace {NS}; `attnload cluster run` starts a test")
    return 0


def _api_key_secret(env_names: list[str]) -> dict[str, Any] | None:
    if not env_names:
        return None
    data = {}
    for name in env_names:
        value = os.environ.get(name)
        if not value:
            raise UsageError(f"--api-key-env {name}: the variable is not set; export {name}=<your key>")
        register_secret(value)
        data[name] = value
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": names.SECRET, "namespace": NS, "labels": names.labels("loadgen")},
        "stringData": data,
    }


def _unready(deployments: list[dict[str, Any]]) -> list[str]:
    waiting = []
    for dep in deployments:
        spec, st = dep.get("spec", {}), dep.get("status", {})
        want = spec.get("replicas", 1)
        current = st.get("observedGeneration", 0) >= dep["metadata"].get("generation", 0)
        if not current or st.get("readyReplicas", 0) < want or st.get("updatedReplicas", 0) < want:
            waiting.append(f"{dep['metadata']['name']} {st.get('readyReplicas', 0)}/{want}")
    return waiting


def wait_ready(kube: Kube, timeout_s: float, poll_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        waiting = _unready(kube.deployments(NS))
        if not waiting:
            return
        if time.monotonic() > deadline:
            raise UsageError(
                f"not ready after {timeout_s:.0f} s: {', '.join(waiting)}; "
                f"see `kubectl -n {NS} get pods` and `attnload cluster logs`"
            )
        time.sleep(poll_s)


def scale(kube: Kube, args: argparse.Namespace) -> int:
    kube.scale(NS, names.WORKER_DEPLOYMENT, args.replicas)
    print(f"scaled {names.WORKER_DEPLOYMENT} to {args.replicas}")
    if not args.no_wait:
        wait_ready(kube, args.timeout)
    return 0


def down(kube: Kube, args: argparse.Namespace) -> int:
    try:
        kube.delete_namespace(NS)
    except NotFound:
        print(f"namespace {NS} does not exist")
        return 0
    print(f"deleting namespace {NS}")
    if not args.no_wait:
        deadline = time.monotonic() + args.timeout
        while kube.namespace_exists(NS):
            if time.monotonic() > deadline:
                raise UsageError(f"namespace {NS} still terminating after {args.timeout:.0f} s")
            time.sleep(2.0)
        print(f"namespace {NS} deleted")
    return 0


# --------------------------------------------------------------------------- status / logs


def status(kube: Kube, args: argparse.Namespace) -> int:
    if not kube.namespace_exists(NS):
        print(f"namespace {NS} does not exist: `attnload cluster up` creates it")
        return 1
    for dep in kube.deployments(NS):
        st = dep.get("status", {})
        print(f"{dep['metadata']['name']:<22} {st.get('readyReplicas', 0)}/{dep['spec'].get('replicas', 1)} ready")
    try:
        stats = _master(kube, "GET", "stats/requests")
    except UsageError as exc:
        print(f"master: not answering ({exc})")
        return 1
    workers = stats.get("workers") or []
    print(
        f"master: state={stats.get('state')} users={stats.get('user_count')} workers={len(workers)} "
        f"rps={stats.get('total_rps', 0):.1f} fail_ratio={stats.get('fail_ratio', 0):.3f}"
    )
    return 0


def logs(kube: Kube, args: argparse.Namespace) -> int:
    selector = f"app.kubernetes.io/name=attnload,app.kubernetes.io/component={args.component}"
    pods = kube.pods(NS, selector)
    if not pods:
        raise UsageError(f"no {args.component} pods in namespace {NS}")
    for pod in pods:
        name = pod["metadata"]["name"]
        print(f"==> {name} <==")
        print(kube.pod_log(NS, name, args.component, args.tail), end="")
    return 0


# --------------------------------------------------------------------------- run / stop / results


def _master(kube: Kube, method: str, path: str, form: dict[str, str] | None = None) -> dict[str, Any]:
    reply = kube.proxy(method, NS, names.MASTER_SERVICE, "web", path, form=form, raw=True)
    try:
        data = json.loads(reply)
    except ValueError:
        raise UsageError(f"Locust master /{path} did not answer JSON: {reply.strip()[:120]}") from None
    return data if isinstance(data, dict) else {}


def start(kube: Kube, args: argparse.Namespace) -> int:
    form = {"user_count": str(args.users), "spawn_rate": str(args.spawn_rate)}
    if args.run_time:
        form["run_time"] = args.run_time
    if args.requests_out:
        form["attnload_requests_out"] = _requests_name(args.requests_out)
    reply = _master(kube, "POST", "swarm", form)
    if not reply.get("success", False):
        raise UsageError(f"the master refused to start: {reply.get('message', reply)}")
    print(f"started: {reply.get('message', 'swarming')}")
    if not args.wait:
        return 0
    state = ""
    while state not in _LOCUST_DONE:
        time.sleep(5.0)
        state = str(_master(kube, "GET", "stats/requests").get("state", ""))
    print("test stopped")
    return fetch_results(kube, args)


def stop(kube: Kube, args: argparse.Namespace) -> int:
    reply = _master(kube, "POST", "stop", {})  # Locust answers GET /stop with 405
    print(f"stopped: {reply.get('message', 'ok')}")
    return 0


_LINK = re.compile(r'href="([^"/?#]+\.(?:json|html|jsonl|jsonl\.gz))"')
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.jsonl(?:\.gz)?")


def _requests_name(text: str) -> str:
    """``--requests-out`` in the cluster: a plain file name, written to the master's results volume."""
    if not _NAME.fullmatch(text):
        raise UsageError(
            f"--requests-out {text}: give a plain file name ending in .jsonl or .jsonl.gz (it is "
            "written to the master's results volume), e.g. requests.jsonl.gz"
        )
    return text


def fetch_results(kube: Kube, args: argparse.Namespace) -> int:
    listing = kube.proxy("GET", NS, names.MASTER_SERVICE, "results", "", raw=True)
    files = sorted(set(_LINK.findall(listing)))
    if not files:
        print("no results yet: a test writes them when it stops (`attnload cluster stop`)")
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for file in files:
        if file.endswith(".gz"):  # the per-request lines, compressed: bytes as they are
            data = kube.proxy("GET", NS, names.MASTER_SERVICE, "results", file, raw="bytes")
            (args.out / file).write_bytes(data)
        else:
            text = kube.proxy("GET", NS, names.MASTER_SERVICE, "results", file, raw=True)
            (args.out / file).write_text(text, encoding="utf-8")
        print(f"{args.out / file}")
    return 0
