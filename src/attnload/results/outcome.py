"""``attnload run``'s exit status: what the run could not do, said in one line.

0: the run did what was asked. 1: it could not (no results, an interrupted snapshot, every user
crashed, the open-loop scheduler died, nothing was sent). 128 + N: it was stopped by signal N
(130 Ctrl-C, 143 SIGTERM), its results marked ``interrupted``. Usage errors (2) never get this far.
The policy for *failed requests* (``--exit-code-on-error``, ``--fail-on``) extends :func:`exit_status`.
"""

from __future__ import annotations

import signal

from attnload.results.model import Results


def exit_status(results: Results | None, signal_received: int | None = None) -> tuple[int, str | None]:
    """``(exit code, the one line that explains a non-zero code)``; checks in order, the first wins."""
    if signal_received is not None:
        name = signal.Signals(signal_received).name
        saved = "results so far written, marked interrupted" if results is not None else "no results were written"
        return 128 + signal_received, f"interrupted by {name}: {saved}"
    if results is None:
        return 1, "the Locust master exited without writing results; see its log above"
    if results.interrupted:
        return 1, (
            "the run ended before its end (the master was killed): the results are its last snapshot, "
            "marked interrupted"
        )
    client = results.client
    if client.scheduler_error:
        return 1, f"the open-loop scheduler died ({client.scheduler_error}): no arrivals were sent after it"
    if client.users_started and client.users_crashed >= client.users_started:
        return 1, (
            f"every user crashed ({client.users_crashed} of {client.users_started}): the traceback is in the log above"
        )
    if not any(model.requests.total for model in results.models):
        return 1, "nothing was sent: the run made no request (check the shape, the profiles and the log above)"
    return 0, None
