"""``attnload cluster up|status|down|logs``: the Kubernetes side (``attnload.cluster.cli``) behind the
common dispatch.

The Kubernetes client is the extra ``attnload[cluster]`` (about 75 MB installed, used by this command
only, and not in the worker, master or simulator image); without it this command says how to install it.
"""

from __future__ import annotations

import argparse
import importlib.util

from attnload.cluster.args import configure
from attnload.errors import UsageError

INSTALL_HINT = "the Kubernetes client is not installed: pip install 'attnload[cluster]'"

__all__ = ["configure", "run"]


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("kubernetes") is None:
        raise UsageError(INSTALL_HINT)
    from attnload.cluster.cli import run as drive

    return drive(args)
