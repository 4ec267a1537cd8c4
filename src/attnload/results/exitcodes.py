"""Exit codes for CI: a finished run turned into a status and the reasons for it (a comparison's: ``report.compare``).

A CI job reads only the status, so every non-zero one comes with the lines that explain it.
The policy is pure (results and thresholds in, ``(code, reasons)`` out) so tests call it directly
and the commands only print the reasons and return the code.

====  =============================================================================================
code  meaning
====  =============================================================================================
0     the run finished and nothing the policy watches went wrong
1     requests failed (``--exit-code-on-error``, Locust's meaning and default), a model finished no
      request (``no_data``), a ``--fail-on`` reason held, or ``report --fail-on-regression`` found a
      regression
2     usage: a bad flag, config or file (one line, before anything is sent)
130   interrupted by SIGINT (Ctrl-C); 143 by SIGTERM
====  =============================================================================================
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from attnload.config.model import Slo
from attnload.errors import ErrorClass, UsageError
from attnload.results.model import ModelSummary, Results
from attnload.results.server import SERVER_GAP_FLAG
from attnload.results.truth.fields import NO_DATA_FLAG

FAIL_ON = ("slo", "saturated", "server-gap", "worker-lost", "no-data")
"""The ``--fail-on`` reasons, each a reason to exit 1."""
DEFAULT_EXIT_CODE_ON_ERROR = 1
"""Locust's default: any failed request makes the run exit 1."""


@dataclass(frozen=True)
class ExitPolicy:
    """What makes a run exit non-zero: ``on_error`` for failed requests (0: ignore them) and the
    ``fail_on`` reasons (each exits 1)."""

    on_error: int = DEFAULT_EXIT_CODE_ON_ERROR
    fail_on: frozenset[str] = frozenset()
    slo: Slo = Slo()


def parse_fail_on(text: str | None) -> frozenset[str]:
    """``slo,saturated,server-gap`` → the set of reasons; an unknown one is a usage error."""
    names = frozenset(n.strip().lower() for n in (text or "").split(",") if n.strip())
    unknown = sorted(names - set(FAIL_ON))
    if unknown:
        raise UsageError(f"--fail-on {', '.join(unknown)}: unknown reason; use any of {','.join(FAIL_ON)}")
    return names


def make_policy(on_error: int | None, fail_on: str | None, slo: Slo) -> ExitPolicy:
    """Validate the flags before the run starts, so a typo fails now and not after an hour of load."""
    code = DEFAULT_EXIT_CODE_ON_ERROR if on_error is None else on_error
    if not 0 <= code <= 255:
        raise UsageError(f"--exit-code-on-error {code}: use 0 (ignore failed requests) to 255")
    reasons = parse_fail_on(fail_on)
    if "slo" in reasons and not slo.is_set:
        raise UsageError("--fail-on slo: the config sets no slo (ttft_p99_s, itl_p99_s or e2e_p99_s)")
    return ExitPolicy(on_error=code, fail_on=reasons, slo=slo)


def run_status(results: Results, policy: ExitPolicy) -> tuple[int, list[str]]:
    """The exit code of a finished run and one line per reason. Failed requests set ``on_error``
    (Locust's rule; cancellations at stop time are not failures); each ``--fail-on`` reason that holds
    sets 1 unless failures already set a code."""
    reasons = empty_models(results.models, ignore_failed=policy.on_error == 0)
    code = 1 if reasons else 0
    failed = _failed(results.models)
    if failed and policy.on_error:
        code = policy.on_error  # the code the user asked for failures wins over no_data's 1
        reasons.append(failed)
    watched: list[str] = []
    if "slo" in policy.fail_on:
        watched += slo_breaches(results.models, policy.slo)
    if "saturated" in policy.fail_on and results.client.client_saturated:
        why = "; ".join(results.client.saturation_reasons) or "no reason recorded"
        watched.append(f"client saturated ({why}): the client, not the server, may have set the latencies")
    if "server-gap" in policy.fail_on:
        watched += server_gaps(results.models)
    if "worker-lost" in policy.fail_on:
        watched += workers_lost(results)
    if "no-data" in policy.fail_on:
        watched += empty_stages(results.models)
    if watched and not code:
        code = 1
    return code, reasons + watched


def empty_models(models: Iterable[ModelSummary], ignore_failed: bool = False) -> list[str]:
    """Each model that finished no request (``no_data``): a reason to exit 1, the run measured nothing for it.
    ``ignore_failed`` (``--exit-code-on-error 0``): a model whose requests all failed is left to that policy."""
    return [
        f"no_data: {m.key} finished no request ({m.no_data_reason})"
        for m in models
        if NO_DATA_FLAG in m.flags and not (ignore_failed and _only_failed(m))
    ]


def _only_failed(model: ModelSummary) -> bool:
    cut = model.censored
    return model.requests.failed > 0 and not cut.waiting_first_token and not cut.streaming


def empty_stages(models: Iterable[ModelSummary]) -> list[str]:
    """Each stage that finished no request (``--fail-on no-data``), of a model that finished some."""
    return [
        f"no_data: {m.key} stage {s.index} ({_load(s.users, s.rate)}) finished no request ({s.no_data_reason})"
        for m in models
        if NO_DATA_FLAG not in m.flags
        for s in m.stages
        if NO_DATA_FLAG in s.flags
    ]


def _failed(models: Iterable[ModelSummary]) -> str:
    parts = [f"{m.key} {m.requests.failed}/{m.requests.total}{_only_fix(m)}" for m in models if m.requests.failed]
    if not parts:
        return ""
    return f"failed requests: {', '.join(parts)} (--exit-code-on-error 0 ignores them)"


def _only_fix(model: ModelSummary) -> str:
    """A model that never succeeded and failed one way only: that class and its fix (a wrong model id, key,
    proxy login: the whole run measured nothing, and the fix is the one thing to do next)."""
    classes = [label for label, n in model.errors.items() if n and label != ErrorClass.CANCELLED.label]
    if model.requests.ok or len(classes) != 1:
        return ""
    kind = ErrorClass.from_label(classes[0])
    return f" all {kind.label}: {kind.value}"


_SLO_FIELDS = (
    ("ttft_p99_s", "ttft_s", "TTFT p99"),
    ("itl_p99_s", "itl_s", "ITL p99"),
    ("e2e_p99_s", "e2e_s", "E2E p99"),
)


def slo_breaches(models: Iterable[ModelSummary], slo: Slo) -> list[str]:
    """Each model whose whole-run p99 exceeds a threshold the config's ``slo`` sets, one line each.
    The whole run, not each stage: a sweep is meant to push stages past the SLO."""
    lines = []
    for model in models:
        for limit_name, summary_name, title in _SLO_FIELDS:
            limit = getattr(slo, limit_name)
            p99 = getattr(model, summary_name).p99
            if limit is not None and p99 is not None and p99 > limit:
                lines.append(f"slo breached: {model.key} {title} {p99 * 1000:.1f} ms > {limit * 1000:g} ms")
    return lines


def server_gaps(models: Iterable[ModelSummary]) -> list[str]:
    """Each stage flagged ``server_client_gap`` (the server's metrics disagree with the client's)."""
    return [
        f"server/client gap: {m.key} stage {s.index} ({_load(s.users, s.rate)})"
        for m in models
        for s in m.stages
        if SERVER_GAP_FLAG in s.flags
    ]


def workers_lost(results: Results) -> list[str]:
    """Each worker lost during the run (``--fail-on worker-lost``): the run measured less load than asked."""
    lines = [
        f"worker lost: {w.worker} at {w.lost_at_s:.1f} s with {sum(w.users.values())} users"
        for w in results.client.lost_workers
    ]
    if results.client.workers_lost and not lines:
        lines.append(f"workers lost: {results.client.workers_lost}")
    return lines


def _load(users: int | None, rate: float | None) -> str:
    return f"{users} users" if users is not None else f"{rate:g} req/s" if rate is not None else "no load"
