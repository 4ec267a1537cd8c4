"""The APIs a model can be driven through (model key ``api``), one object each (apis/base.py says what one is).

Gateways speak more than chat completions: ``vllm bench serve`` and most published serving
numbers use ``/v1/completions``, OpenAI's own clients default to the Responses API, Claude
Code goes through Anthropic's Messages API and Google's models through Gemini's
``streamGenerateContent``. The workload is built once, as chat messages; each API object turns
it into its own body and reads its own stream back, so the same profile measures the same
work whichever API carries it. Adding an API is one module here and one line in ``APIS``
(and, for the simulator to serve it, one dialect in sim/serving/dialects.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnload.apis.anthropic import AnthropicMessages
from attnload.apis.base import Api
from attnload.apis.gemini import Gemini
from attnload.apis.openai import Chat, Completions
from attnload.apis.responses import Responses


def _named(name: str, api: Api) -> Api:
    api.name = name
    return api


APIS: dict[str, Api] = {
    name: _named(name, api)
    for name, api in (
        ("chat", Chat()),
        ("completions", Completions()),
        ("responses", Responses()),
        ("messages", AnthropicMessages()),
        ("gemini", Gemini()),
    )
}
"""Every API by its model-key name; the first is the default."""
DEFAULT_API = next(iter(APIS.values()))


def api_of(name: str) -> Api:
    """The API object of a model's ``api`` key (a one-line ``ValueError`` naming the choices otherwise)."""
    api = APIS.get(name)
    if api is None:
        raise ValueError(
            f"api {name!r} is not an API attnload speaks: use one of {', '.join(APIS)} (default {DEFAULT_API.name})"
        )
    return api


def request_body(api: str, model_id: str, messages: Sequence[dict[str, Any]], **settings: Any) -> dict[str, Any]:
    """The body of one request of the API named ``api`` for the chat-shaped ``messages`` (``Api.body``)."""
    return api_of(api).body(model_id, messages, **settings)
