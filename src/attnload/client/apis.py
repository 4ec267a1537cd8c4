"""The four APIs a model can be driven through (model key ``api``): what to send and how to authenticate.

Gateways speak more than chat completions: ``vllm bench serve`` and most published serving
numbers use ``/v1/completions``, OpenAI's own clients default to the Responses API, and
Claude Code goes through the Anthropic Messages API. The workload is built once, as chat
messages; ``request_body`` turns those into each API's body (its prompt field, its name
for the output limit, usage asked for in the stream where the API needs asking), so the
same profile measures the same work whichever API carries it. How each answer streams
back is client/grammar.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attnload.measure.tokens import message_text

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header every Messages request carries (the API refuses a request without one)."""


def auth_header(api: str, api_key: str | None, key_header: str | None = None) -> str:
    """The authentication header lines: Bearer for the OpenAI APIs, ``x-api-key`` + version for Messages;
    ``key_header`` (the model key ``auth_header``, e.g. Azure OpenAI's ``api-key``) sends the bare key
    in that header instead."""
    if key_header:
        key = f"{key_header}: {api_key}\r\n" if api_key else ""
        return key + (f"anthropic-version: {ANTHROPIC_VERSION}\r\n" if api == "messages" else "")
    if api == "messages":
        key = f"x-api-key: {api_key}\r\n" if api_key else ""
        return f"{key}anthropic-version: {ANTHROPIC_VERSION}\r\n"
    return f"Authorization: Bearer {api_key}\r\n" if api_key else ""


def request_body(
    api: str,
    model_id: str,
    messages: Sequence[dict[str, Any]],
    *,
    max_tokens: int,
    temperature: float,
    stream: bool = True,
    ignore_eos: bool = False,
    tools: Sequence[dict[str, Any]] | None = None,
    tool_choice: str | None = None,
) -> dict[str, Any]:
    """The body of one request of ``api`` asking for the same work as the chat body of ``messages``.

    An agent step adds its ``tools`` array; ``tool_choice`` only when set (omitted, as an agent sends it)."""
    body: dict[str, Any] = {"model": model_id}
    if api == "completions":
        body.update(prompt=completion_prompt(messages), max_tokens=max_tokens)
    elif api == "responses":
        body.update(input=list(messages), max_output_tokens=max_tokens)
    elif api == "messages":
        system = [str(m.get("content", "")) for m in messages if m.get("role") == "system"]
        body["messages"] = [m for m in messages if m.get("role") != "system"]
        body["max_tokens"] = max_tokens
        if system:
            body["system"] = "\n\n".join(system)
    else:
        body.update(messages=list(messages), max_tokens=max_tokens)
    body["temperature"] = temperature
    body["stream"] = stream
    if stream and api in ("chat", "completions"):
        body["stream_options"] = {"include_usage": True}  # Responses and Messages always report usage
    if ignore_eos and api != "messages":  # vLLM/SGLang extensions; the Messages API has no such field
        body["ignore_eos"] = True
        body["min_tokens"] = max_tokens
    if tools is not None:
        body["tools"] = list(tools)
        if tool_choice is not None:
            body["tool_choice"] = tool_choice
    return body


def completion_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    """The plain prompt of a completions request: the messages' texts, one paragraph each."""
    return "\n\n".join(message_text(m.get("content", "")) for m in messages)


def max_tokens_of(body: Mapping[str, Any]) -> int:
    """The output limit of a body, whatever the API calls it."""
    value = body.get("max_tokens") or body.get("max_completion_tokens") or body.get("max_output_tokens") or 0
    return int(value) if isinstance(value, int) else 0
