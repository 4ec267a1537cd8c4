"""The NetworkPolicies allow exactly the flows docs/kubernetes.md states, and nothing else.

A flow between two pods of the namespace needs both sides: an egress rule on the source
and an ingress rule on the destination. So the policies are read into two sets of
(from, to, port), one per direction, and each table row must be in the set of every side
that is a pod of ours, while every element of either set must be a table row. Selectors
are resolved against the real pod labels of deploy/ (and the extras' Job), so a typo in a
label selects nobody and shows up as a missing flow.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from attnload.cluster import generate, manifests, names

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
EXTRAS = DEPLOY / names.EXTRAS_DIR
COMPONENT = "app.kubernetes.io/component"
Flow = tuple[str, str, str]


def _extras() -> list[dict[str, Any]]:
    return [doc for p in sorted(EXTRAS.glob("*.yaml")) for doc in yaml.safe_load_all(p.read_text()) if doc]


def _pods(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """component -> pod template labels, for every workload."""
    return {
        o["spec"]["template"]["metadata"]["labels"][COMPONENT]: o["spec"]["template"]["metadata"]["labels"]
        for o in objects
        if o["kind"] in ("Deployment", "Job")
    }


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        assert expr["operator"] == "In", f"unsupported operator in {expr}"
        if labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _selected(selector: dict[str, Any], pods: dict[str, dict[str, str]]) -> set[str]:
    return {c for c, labels in pods.items() if _matches(selector, labels)}


def _peers(rule_peers: list[dict[str, Any]] | None, pods: dict[str, dict[str, str]]) -> set[str]:
    if not rule_peers:
        return {"any"}
    out: set[str] = set()
    for peer in rule_peers:
        if "ipBlock" in peer:
            assert "except" not in peer["ipBlock"], peer
            cidr = peer["ipBlock"]["cidr"]
            out.add("api-server" if cidr == names.APISERVER_PLACEHOLDER_CIDR else cidr)
        elif "namespaceSelector" in peer:
            namespace = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            if "podSelector" not in peer:  # every pod of that namespace
                out.add(f"{namespace}/*")
                continue
            pod = peer["podSelector"]["matchLabels"]
            out.add(f"{namespace}/{pod.get('k8s-app') or pod['app.kubernetes.io/name']}")
        else:
            selected = _selected(peer["podSelector"], pods)
            assert selected, f"{peer} selects no pod"
            out |= selected
    return out


def _ports(rule: dict[str, Any]) -> set[str]:
    return {f"{p['port']}/{p.get('protocol', 'TCP')}" for p in rule.get("ports") or []} or {"any"}


def allowed(objects: list[dict[str, Any]]) -> tuple[set[Flow], set[Flow]]:
    """(ingress, egress) flows the NetworkPolicies among ``objects`` allow."""
    pods = _pods(objects)
    ingress: set[Flow] = set()
    egress: set[Flow] = set()
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        spec = policy["spec"]
        targets = _selected(spec["podSelector"], pods)
        assert targets, f"{policy['metadata']['name']} selects no pod"
        types = set(spec["policyTypes"])
        assert types >= {k.capitalize() for k in ("ingress", "egress") if spec.get(k)}, policy["metadata"]["name"]
        for rule in spec.get("ingress") or []:
            ingress |= {(p, t, port) for t in targets for p in _peers(rule.get("from"), pods) for port in _ports(rule)}
        for rule in spec.get("egress") or []:
            egress |= {(t, p, port) for t in targets for p in _peers(rule.get("to"), pods) for port in _ports(rule)}
    return ingress, egress


def documented(marker: str) -> set[Flow]:
    """Rows of the table after ``<!-- flows: marker -->``; a cell's code spans multiply out."""
    text = (ROOT / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    table = text.split(f"<!-- flows: {marker} -->", 1)[1].strip().split("\n\n", 1)[0]
    rows: set[Flow] = set()
    for line in table.splitlines()[2:]:
        cells = [re.findall(r"`([^`]+)`", cell) for cell in line.strip("|").split("|")[:3]]
        assert all(cells), f"a from/to/port cell without a `code` name: {line}"
        rows |= {(src, dst, port) for src in cells[0] for dst in cells[1] for port in cells[2]}
    return rows


def _check(objects: list[dict[str, Any]], table: set[Flow]) -> None:
    pods = set(_pods(objects))
    ingress, egress = allowed(objects)
    assert ingress - table == set(), "allowed in, but not in docs/kubernetes.md"
    assert egress - table == set(), "allowed out, but not in docs/kubernetes.md"
    assert {f for f in table if f[1] in pods} - ingress == set(), "documented, but no ingress rule"
    assert {f for f in table if f[0] in pods} - egress == set(), "documented, but no egress rule"


def test_default_deny_covers_every_pod_both_ways() -> None:
    deny = next(o for o in manifests.load(DEPLOY) if o["metadata"]["name"] == "attnload-default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_deploy_policies_allow_exactly_the_documented_flows() -> None:
    table = documented("deploy")
    assert ("worker", "master", "5557/TCP") in table and ("api-server", "master", "8089/TCP") in table
    assert not any(f[1] == "master" and f[0] in ("any", "0.0.0.0/0") for f in table)
    _check(manifests.load(DEPLOY), table)


def test_extras_add_exactly_their_documented_flows() -> None:
    table = documented("deploy") | documented("extras")
    _check(manifests.load(DEPLOY) + _extras(), table)


def test_model_server_namespaces_add_exactly_their_documented_flows() -> None:
    """`generate --model-server-namespace vllm`: Prometheus may reach every pod there (the docs' example)."""
    text = generate.render(ROOT, (names.NAMESPACE, "vllm"))[names.GENERATED_PROMETHEUS_FILE]
    generated = [doc for doc in yaml.safe_load_all(text) if doc]
    objects = [
        o
        for o in manifests.load(DEPLOY)
        if o["metadata"]["name"] != names.PROMETHEUS_CONFIG_MAP or o["kind"] != "ConfigMap"
    ] + generated
    table = documented("deploy") | documented("model-servers")
    assert ("prometheus", "vllm/*", "any") in table
    _check(objects, table)


def test_in_cluster_flows_target_ports_the_pods_expose() -> None:
    objects = manifests.load(DEPLOY) + _extras()
    exposed = {
        o["spec"]["template"]["metadata"]["labels"][COMPONENT]: {
            f"{p['containerPort']}/TCP" for c in o["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])
        }
        for o in objects
        if o["kind"] in ("Deployment", "Job")
    }
    ingress, _ = allowed(objects)
    for src, dst, port in ingress:
        assert port in exposed[dst], f"{src} -> {dst}:{port}: {dst} exposes only {sorted(exposed[dst])}"
    assert exposed["worker"] == set()  # workers serve nothing, so they admit nothing


def test_the_table_parser_sees_a_missing_flow() -> None:
    objects = manifests.load(DEPLOY)
    ingress, egress = allowed(objects)
    policy = next(o for o in objects if o["metadata"]["name"] == "attnload-worker")
    policy["spec"]["egress"].pop()  # worker -> sim:8000
    ingress2, egress2 = allowed(objects)
    assert egress - egress2 == {("worker", "sim", "8000/TCP")} and ingress2 == ingress
