"""Fault injection for the exit-status e2e tests (on ``PYTHONPATH`` only there).

``ATTNLOAD_TEST_FAULT=users`` makes every closed-loop user raise in ``on_start`` (as a config value
no request can be built from would); ``=scheduler`` makes the open-loop scheduler raise. The patch
is applied when the module is first imported (a post-import hook), so nothing is imported early:
Locust must still monkey-patch gevent before anything else loads.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from typing import Any

FAULT = os.environ.get("ATTNLOAD_TEST_FAULT", "")
TARGETS = {"users": "attnload.runner.sender.sender", "scheduler": "attnload.runner.sender.openloop"}


def _boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError(f"injected fault ({FAULT})")


def _patch(module: Any) -> None:
    if FAULT == "users":
        module.Sender.assign_model = _boom
    elif FAULT == "scheduler":
        module.arrival_offsets = _boom


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGETS.get(FAULT):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if FAULT in TARGETS:
    sys.meta_path.insert(0, _Finder())
