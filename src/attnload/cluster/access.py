"""Who may reach the stack: Grafana's admin password and the API server's way to the master.

``attnload cluster up`` calls both before applying:

- Grafana requires the Secret ``attnload-grafana`` (no admin/admin fallback). When it is
  absent, a random password is generated and applied with the stack; an existing one is
  never replaced. The password is never printed, only how to read it.
- The NetworkPolicy ``attnload-master-apiserver`` admits the Locust web API (8089) and the
  results listing (8090) only from the API server, whose service proxy carries
  ``attnload cluster run|stop|results``. The API server's addresses come from the
  ``kubernetes`` Service's EndpointSlices; without them the placeholder (which admits
  nobody) stays and a line says how to set it. ``attnload-prometheus-apiserver`` gets the same
  addresses as its egress peers: Prometheus watches pods through the API server (discovery.py).
"""

from __future__ import annotations

import ipaddress
import secrets
from typing import Any

from attnload.cluster import names
from attnload.cluster.kube import Kube, NotFound
from attnload.errors import UsageError, register_secret

PASSWORD_BYTES = 18
READ_PASSWORD = (
    f"kubectl -n {names.NAMESPACE} get secret {names.GRAFANA_SECRET} "
    f"-o jsonpath='{{.data.{names.GRAFANA_SECRET_KEY}}}' | base64 -d"
)
_APISERVER_SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"


def grafana_secret(kube: Kube) -> dict[str, Any] | None:
    """A new Secret with a random admin password, or None when one exists already."""
    try:
        kube.request("GET", f"/api/v1/namespaces/{names.NAMESPACE}/secrets/{names.GRAFANA_SECRET}")
        return None
    except NotFound:
        pass
    password = secrets.token_urlsafe(PASSWORD_BYTES)
    register_secret(password)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": names.GRAFANA_SECRET,
            "namespace": names.NAMESPACE,
            "labels": names.labels("grafana", "grafana"),
        },
        "stringData": {names.GRAFANA_SECRET_KEY: password},
    }


def apiserver_cidrs(kube: Kube) -> list[str]:
    """One /32 (or /128) per API server address; [] when they cannot be read."""
    try:
        reply = kube.request("GET", _APISERVER_SLICES, query={"labelSelector": "kubernetes.io/service-name=kubernetes"})
    except UsageError:  # NotFound, or RBAC without list on endpointslices: keep the placeholder
        return []
    cidrs = set()
    for item in reply.get("items") or []:
        for endpoint in item.get("endpoints") or []:
            for address in endpoint.get("addresses") or []:
                try:
                    ip = ipaddress.ip_address(address)
                except ValueError:  # an FQDN slice: no ipBlock can name it
                    continue
                cidrs.add(f"{ip}/{ip.max_prefixlen}")
    return sorted(cidrs)


# NetworkPolicy -> the direction and peer field that holds the API server placeholder: the master
# admits the API server's service proxy; Prometheus reaches the API server to discover pods.
_APISERVER_PEERS = {names.APISERVER_POLICY: ("ingress", "from"), names.PROMETHEUS_APISERVER_POLICY: ("egress", "to")}


def point_policy_at_apiserver(objects: list[dict[str, Any]], cidrs: list[str]) -> bool:
    """Replace the placeholder peers of the API server policies; False if the master's is not there."""
    if not cidrs:  # an empty `from`/`to` would allow every peer
        raise ValueError("no API server address to admit")
    found = False
    for obj in objects:
        if obj.get("kind") != "NetworkPolicy" or obj["metadata"]["name"] not in _APISERVER_PEERS:
            continue
        direction, peers = _APISERVER_PEERS[obj["metadata"]["name"]]
        for rule in obj["spec"].get(direction) or []:
            rule[peers] = [{"ipBlock": {"cidr": cidr}} for cidr in cidrs]
        found = found or obj["metadata"]["name"] == names.APISERVER_POLICY
    return found
