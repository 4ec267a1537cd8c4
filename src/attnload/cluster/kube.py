"""The Kubernetes API as attnload uses it: a few REST calls through the kubernetes client.

The kubernetes Python client supplies what is hard (kubeconfig and in-cluster config,
TLS, tokens, exec credential plugins); the calls themselves are made by path so each one
is exactly what ``kubectl`` would send and a test can assert it:

- apply = server-side apply (``PATCH`` with ``application/apply-patch+yaml``, field manager
  ``attnload``), which creates or updates in one call, like ``kubectl apply --server-side``; the
  object's path comes from the API's discovery (resources.py), so any kind the cluster serves applies;
- pod HTTP (Locust's /swarm, /stop, the results listing) goes through the API server's
  service proxy (``/api/v1/namespaces/NS/services/NAME:PORT/proxy/PATH``), so nothing
  is port-forwarded and nothing but the API server needs to be reachable.

Every foreign failure (no kubeconfig, unreachable server, HTTP errors) becomes a
one-line :class:`UsageError` here, at this one boundary.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from attnload.cluster.resources import Discovery
from attnload.errors import UsageError

FIELD_MANAGER = "attnload"
NO_CLUSTER = "no Kubernetes cluster configured: set KUBECONFIG or create ~/.kube/config (kind create cluster)"


class NotFound(UsageError):
    """The object does not exist (HTTP 404); callers that expect that catch it."""


def _kubeconfig_present(path: str | None) -> bool:
    if path:
        return True
    env = os.environ.get("KUBECONFIG", "")
    candidates = [p for p in env.split(os.pathsep) if p] or [str(Path.home() / ".kube" / "config")]
    return any(Path(p).expanduser().is_file() for p in candidates)


def connect(kubeconfig: str | None = None, context: str | None = None) -> Kube:
    """An API connection from --kubeconfig, $KUBECONFIG, ~/.kube/config or in-cluster config."""
    try:
        if not _kubeconfig_present(kubeconfig) and os.environ.get("KUBERNETES_SERVICE_HOST"):
            configuration = k8s.Configuration()
            k8s_config.load_incluster_config(client_configuration=configuration)
            return Kube(k8s.ApiClient(configuration))
        if not _kubeconfig_present(kubeconfig):
            raise UsageError(NO_CLUSTER)
        # Resolved here: the client reads $KUBECONFIG once, at import time.
        path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        return Kube(k8s_config.new_client_from_config(config_file=path, context=context, persist_config=False))
    except ConfigException as exc:
        raise UsageError(f"{NO_CLUSTER} ({str(exc).strip().splitlines()[0]})") from None


class Kube:
    """Raw JSON calls over the kubernetes client's authenticated ApiClient."""

    def __init__(self, api: k8s.ApiClient, timeout_s: float = 30.0) -> None:
        self.api = api
        self.timeout_s = timeout_s
        self.discovery = Discovery(lambda path: self.request("GET", path), NotFound)

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        form: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        raw: bool | str = False,
    ) -> Any:
        """One API call; returns parsed JSON (or text when ``raw``; the body's bytes when ``raw="bytes"``)."""
        headers = {"Accept": "*/*" if raw else "application/json"}
        if body is not None or form is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded" if form is not None else content_type
        if isinstance(body, dict) and "json" not in headers.get("Content-Type", ""):
            body = json.dumps(body)  # apply-patch+yaml takes JSON, which is YAML
        method_, url, headers, body, post = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            post_params=list((form or {}).items()) or None,
            auth_settings=["BearerToken"],
        )
        try:
            reply = self.api.call_api(
                method_, url, header_params=headers, body=body, post_params=post, _request_timeout=self.timeout_s
            )
            reply.read()
        except urllib3.exceptions.HTTPError as exc:
            raise UsageError(
                f"cannot reach the Kubernetes API at {self.server}: {type(exc).__name__}; "
                "is the cluster running? (kubectl cluster-info)"
            ) from None
        except ApiException as exc:  # raised by the REST layer for transport-level failures
            raise UsageError(f"Kubernetes API {method} {path}: {exc.reason}") from None
        text = (reply.data or b"").decode("utf-8", "replace")
        if reply.status == 404:
            raise NotFound(f"not found: {method} {path}")
        if not 200 <= reply.status < 300:
            raise UsageError(f"Kubernetes API {method} {path}: HTTP {reply.status} {_message(text)}")
        if raw == "bytes":
            return reply.data or b""
        if raw:
            return text
        return json.loads(text) if text.strip() else {}

    # ----------------------------------------------------------------- objects

    def object_path(self, obj: Mapping[str, Any]) -> str:
        """The object's path, its kind's plural and scope found by discovery (resources.py)."""
        return self.discovery.path(obj)

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply: create or update ``obj`` in one call; we own the fields we set."""
        result: dict[str, Any] = self.request(
            "PATCH",
            self.object_path(obj),
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
            body=dict(obj),
            content_type="application/apply-patch+yaml",
        )
        return result

    def deployments(self, namespace: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments")["items"]
        return items

    def scale(self, namespace: str, deployment: str, replicas: int) -> None:
        self.request(
            "PATCH",
            f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}/scale",
            body={"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )

    def namespace_exists(self, namespace: str) -> bool:
        try:
            self.request("GET", f"/api/v1/namespaces/{namespace}")
        except NotFound:
            return False
        return True

    def delete_namespace(self, namespace: str) -> None:
        self.request("DELETE", f"/api/v1/namespaces/{namespace}", body={"propagationPolicy": "Foreground"})

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.request(
            "GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": selector}
        )["items"]
        return items

    def pod_log(self, namespace: str, pod: str, container: str, tail: int) -> str:
        text: str = self.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods/{pod}/log",
            query={"container": container, "tailLines": str(tail)},
            raw=True,
        )
        return text

    # ----------------------------------------------------------------- service proxy

    def proxy(
        self,
        method: str,
        namespace: str,
        service: str,
        port: str,
        path: str = "",
        form: Mapping[str, str] | None = None,
        raw: bool | str = False,
    ) -> Any:
        """HTTP to a Service port through the API server (no port-forward needed)."""
        return self.request(
            method, f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/{path}", form=form, raw=raw
        )


def _message(text: str) -> str:
    """The API server's Status message, or the start of whatever came back."""
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:200]
    return str(data.get("message", "")) if isinstance(data, dict) else text[:200]
