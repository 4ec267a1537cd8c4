"""A model server's /metrics as a scraped source: vLLM, SGLang or the attnload simulator.

The poller's loop and failure rules (``scrape/poller.py``) with the server parser
(``scrape/parse.py``) and a ``ServerWindow`` per model. A model is found by its id or an
alias in the server's ``model_name`` label (or is the only model served); a server that
serves only other models turns that model's view off at the first scrape.
"""

from __future__ import annotations

from collections.abc import Collection

from attnload.scrape.parse import Exposition, ServerSample, parse_exposition
from attnload.scrape.source import ScrapeTarget, Source, StageWindow
from attnload.scrape.summary import ServerSummary
from attnload.scrape.window import ServerWindow


class ServerSource(Source[ScrapeTarget, Exposition, ServerSample, ServerSummary]):
    """vLLM's, SGLang's or the simulator's /metrics, one ``ServerSample`` per served model; a model
    missing from a page that answers is off at once (the page serves other models)."""

    what = "server metrics"
    hints = {
        "http": "no Prometheus /metrics there; set metrics_url or --server-metrics off",
        "connection": "nothing answered; set metrics_url to the server's metrics port",
        "not_prometheus": "the body is not Prometheus text; set metrics_url",
        "unknown_server": "Prometheus text, but no vLLM, SGLang or attnload sim metrics in it",
        "too_large": "the body is too large for a metrics page",
    }

    def parse(self, text: str) -> Exposition:
        return parse_exposition(text)

    def pick(self, exposition: Exposition, target: ScrapeTarget, at_s: float) -> ServerSample | None:
        return exposition.sample_for(target.names)

    def unmatched(self, exposition: Exposition, target: ScrapeTarget, url: str) -> str:
        served = ", ".join(sorted(exposition.samples)) or "none"
        return f"{url} serves {served}, none is {_names(target.names)}"

    def window(self) -> StageWindow[ServerSample, ServerSummary]:
        return ServerWindow()


SERVER = ServerSource()


def _names(names: Collection[str]) -> str:
    return " or ".join(sorted(names)) or "this model"
