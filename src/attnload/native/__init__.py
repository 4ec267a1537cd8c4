"""Which implementation of the per-chunk work runs: the C extension ``attnload.native._fastpath`` or pure Python.

Why one switch: the compiled path must measure exactly what the pure-Python path measures
(docs/performance.md, "The compiled path"), so both stay importable side by side and the
choice is made here, once per process: the extension when it was built, unless
``ATTNLOAD_PURE_PYTHON=1``. A missing extension (no C compiler at install time) is said in
one log line, the first time a client or histogram asks, never per user or per request.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

PURE_ENV = "ATTNLOAD_PURE_PYTHON"
log = logging.getLogger("attnload")

_decided = False
_active: ModuleType | None = None


def extension() -> ModuleType | None:
    """The compiled module when it was built and imports, whatever the switch says."""
    try:
        return importlib.import_module("attnload.native._fastpath")
    except ImportError:
        return None


def forced_pure() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def active() -> ModuleType | None:
    """The module the hot path uses now, or None for the pure-Python path (decided at first call)."""
    global _active, _decided
    if not _decided:
        module = None if forced_pure() else extension()
        if module is None and not forced_pure():
            log.warning(
                "attnload: the compiled client path (attnload.native._fastpath) is not installed "
                "(built without a C compiler?); using the pure-Python path, which costs more CPU per token"
            )
        elif module is None:
            log.info("attnload: %s=1: using the pure-Python client path", PURE_ENV)
        _active, _decided = module, True
    return _active


def implementation() -> str:
    """``compiled`` or ``python``: what ``active()`` chose (the bench and the results say which)."""
    return "compiled" if active() is not None else "python"


def use(compiled: bool) -> None:
    """Tests and benchmarks: pick a path for this process (compiled needs the extension)."""
    global _active, _decided
    if compiled:
        module = extension()
        if module is None:
            raise RuntimeError("attnload.native._fastpath is not built")
        _active = module
    else:
        _active = None
    _decided = True


def reset() -> None:
    """Forget the choice: the next ``active()`` decides again from the environment."""
    global _active, _decided
    _active, _decided = None, False
