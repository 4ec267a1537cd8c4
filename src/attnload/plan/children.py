"""The contract between ``attnload run`` and the Locust processes it starts: how long a stop may take,
and how a child learns that its parent is gone.

Both sides read these names: the parent bounds the master's stop by :data:`INTERRUPT_GRACE_S` and
arms :func:`die_with_parent`; the master waits that long for its workers (``runner/stops.py``) and
polls the pid in :data:`PARENT_PID_ENV`. Load never outlives the command that started it, and the
master collects its workers' final counts before it writes, even when that command was killed.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

INTERRUPT_GRACE_S = 7.0
"""Beyond ``--stop-timeout``: how long an interrupted master waits for workers before writing anyway."""
PARENT_PID_ENV = "ATTNLOAD_PARENT_PID"
"""Set by ``attnload run`` for its children: the pid whose death ends them."""
WORKER_DEATH_SIGNAL = signal.SIGHUP
"""What a worker gets when ``attnload run`` dies: not SIGTERM, which would end it at once with its last
counts unsent. The master (which gets SIGTERM) stops the workers and collects their final counts before
it writes; a worker ends on its own only if the master does not (``runner/stops.py``)."""
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``signum`` when ``parent_pid`` dies, even by SIGKILL (Linux)."""

    def preexec() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # not Linux: the getppid watch in the child still ends it
        if os.getppid() != parent_pid:
            os._exit(1)  # the parent died before the death signal was armed

    return preexec
