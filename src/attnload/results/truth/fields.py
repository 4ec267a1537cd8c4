"""The results' fields of what a run did not measure (a leaf: ``results.model`` embeds them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

NO_DATA_FLAG = "no_data"
"""Model or stage flag: no request finished there, so its latencies are not a measurement."""
TTFT_LONG_FLAG = "ttft_long"
"""Stage flag: TTFT p50 above a third of the stage, so the stage cut many requests before their answer."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Censored(_Model):
    """Requests a stop cut (``cancelled``), by what they had seen: their TTFT is counted or censored."""

    waiting_first_token: int = 0
    """Cut before their first token: their TTFT is at least their wait (right-censored)."""
    streaming: int = 0
    """Cut while their answer streamed: their TTFT and ITL count, their e2e does not."""


class ErrorExample(_Model):
    """One failed request as the server answered it (the first three of each error class are kept)."""

    time: str
    """When it failed (ISO 8601, UTC)."""
    http_status: int | None = None
    """The response's status (None: no response head arrived)."""
    body: str | None = None
    """The first 300 bytes of the response body, keys and bearer tokens redacted (None: no body)."""
    detail: str = ""
    """attnload's one-line reading of the failure (the same words as ``--requests-out``'s ``error_detail``)."""


class StalledExcluded(_Model):
    """Latencies without the requests a stalled worker held across its silence (``worker_stalled``)."""

    requests: int = 0
    """Requests left out: those in flight while their worker was frozen or cut off."""
    ttft_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None
    itl_p99_s: float | None = None


class Interval(_Model):
    """A verdict figure with its sample and its 95 % interval."""

    value: float | None = None
    low: float | None = None
    high: float | None = None
    requests: int = 0
    """Finished requests the figure is computed from."""
    itl_samples: int = 0
    """Token gaps behind it (decode figures)."""


class Evidence(_Model):
    """A stage's medians with their 95 % intervals and samples, for the verdict's figures."""

    ttft_p50_s: Interval = Interval()
    tpot_p50_s: Interval = Interval()
    """At 97.5 % each, so a ratio of two stages' TPOT (a ladder's decode change) holds at 95 %."""
