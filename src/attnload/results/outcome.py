"""``attnload run``'s exit status: what the run could not do, said in one line.

0: the run did what was asked. 1: it could not (no results, a killed master's snapshot, every user
crashed, the open-loop scheduler died, nothing was sent). 128 + N: it, or one of its Locust
processes, was stopped by signal N (130 Ctrl-C, 143 SIGTERM), its results marked ``interrupted``.
Usage errors (2) never get this far.
The policy for *failed requests* (``--exit-code-on-error``, ``--fail-on``) extends :func:`exit_status`.
"""

from __future__ import annotations

import signal

from attnload.results.model import Results


def exit_status(
    results: Results | None, signal_received: int | None = None, signalled: str = ""
) -> tuple[int, str | None]:
    """``(exit code, the one line that explains a non-zero code)``; checks in order, the first wins.

    Whether the results are complete is read from the file (a snapshot says ``snapshot``), never from
    which process ended first; ``signalled`` names the process a signal stopped when it was not
    ``attnload run`` itself (e.g. "the Locust master")."""
    if signal_received is not None:
        name = signal.Signals(signal_received).name
        by = f" of {signalled}" if signalled else ""
        if results is None:
            saved = "no results were written"
        elif results.snapshot:
            saved = "only its last snapshot was written (marked snapshot: the counts stop there)"
        elif results.interrupted:
            saved = "results so far written (complete up to the stop), marked interrupted"
        else:
            saved = "the run went on to its end and its results are complete"
        return 128 + signal_received, f"interrupted by {name}{by}: {saved}"
    if results is None:
        return 1, "the Locust master exited without writing results; see its log above"
    if results.snapshot:
        return 1, (
            "the run ended before its end (the master was killed): the results are its last snapshot, "
            "marked snapshot and interrupted"
        )
    if results.interrupted:
        return 1, "the run was stopped before its end: the results are complete up to the stop, marked interrupted"
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
