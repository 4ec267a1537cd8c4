"""``attnload cluster up|status|down|logs``: the Kubernetes side (``attnload.cluster.cli``) behind the
common dispatch."""

from attnload.cluster.cli import configure, run

__all__ = ["configure", "run"]
