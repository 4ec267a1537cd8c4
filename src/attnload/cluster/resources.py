"""Where an object of any kind lives in the Kubernetes API, from the API server's own discovery.

``cluster up`` applies whatever deploy/ (and, when asked, deploy/extras/) holds: a Job, a
ServiceMonitor or a PrometheusRule as well as the core kinds. A table of kinds would refuse
every kind it does not list and go stale with each CRD; instead the group-version of each
object (its ``apiVersion``) is asked for its resource list once (``GET /api/v1``,
``GET /apis/GROUP/VERSION``, as ``kubectl`` discovers), which names the kind's plural and
whether it is namespaced. A group-version the cluster does not serve (a CRD not installed, such
as the Prometheus Operator's) is a one-line error naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from attnload.errors import UsageError

Resource = tuple[str, bool]
"""A kind's (plural, namespaced)."""


class Discovery:
    """The API's resource lists, fetched once per group-version through ``get`` (a JSON GET)."""

    def __init__(self, get: Callable[[str], Any], missing: type[Exception]) -> None:
        self._get = get
        self._missing = missing
        """The exception ``get`` raises for a 404: the group-version is not served."""
        self._lists: dict[str, dict[str, Resource]] = {}

    def path(self, obj: Mapping[str, Any]) -> str:
        """The object's own path (``PATCH`` it to apply), e.g. ``/apis/batch/v1/namespaces/NS/jobs/NAME``."""
        api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        name = obj.get("metadata", {}).get("name")
        if not api_version or not kind or not name:
            raise UsageError(f"a manifest object lacks apiVersion, kind or metadata.name: {dict(obj)!r:.120}")
        prefix = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
        plural, namespaced = self._resource(prefix, api_version, kind)
        namespace = obj["metadata"].get("namespace")
        if namespaced:
            if not namespace:
                raise UsageError(f"{kind}/{name} is namespaced: give it metadata.namespace")
            return f"{prefix}/namespaces/{namespace}/{plural}/{name}"
        return f"{prefix}/{plural}/{name}"

    def _resource(self, prefix: str, api_version: str, kind: str) -> Resource:
        resources = self._lists.get(prefix)
        if resources is None:
            try:
                listing = self._get(prefix)
            except self._missing:
                raise UsageError(
                    f"this cluster does not serve {api_version} (kind {kind}): install the CRDs that define it "
                    "(e.g. the Prometheus Operator for monitoring.coreos.com), or leave that manifest out"
                ) from None
            resources = self._lists[prefix] = {
                str(r["kind"]): (str(r["name"]), bool(r.get("namespaced")))
                for r in listing.get("resources", [])
                if "/" not in str(r.get("name", ""))  # subresources (deployments/scale) share the kind
            }
        if kind not in resources:
            raise UsageError(f"this cluster serves no kind {kind} in {api_version}: check the manifest's apiVersion")
        return resources[kind]
