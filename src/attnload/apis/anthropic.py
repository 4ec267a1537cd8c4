"""Anthropic's Messages API: ``message_start``, ``content_block_start``/``_delta`` (text, thinking),
``message_delta`` (stop reason, usage), ``message_stop``; the key in ``x-api-key`` with an
``anthropic-version``; field names as vLLM 0.32 streams them (``entrypoints/anthropic``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attnload.apis.base import MESSAGES, Api, Stream, chat_usage, count, load_event, stop_reason, text_of, unary_parts
from attnload.errors import ErrorClass, RequestFailed
from attnload.measure.tokens import chunk_tokens, message_text

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header every Messages request carries (the API refuses a request without one)."""


class AnthropicMessages(Api):
    """``POST /v1/messages``: system messages apart in ``system``; no ``ignore_eos``."""

    end = "message_stop"
    path_tail = "/" + MESSAGES
    needs_key = True

    def headers(self, api_key: str | None, key_header: str | None = None) -> str:
        key = f"{key_header or 'x-api-key'}: {api_key}\r\n" if api_key else ""
        return f"{key}anthropic-version: {ANTHROPIC_VERSION}\r\n"

    def body(self, model_id: str, messages: Sequence[dict[str, Any]], **settings: Any) -> dict[str, Any]:
        settings["ignore_eos"] = False  # a vLLM/SGLang extension the Messages API has no field for
        return super().body(model_id, messages, **settings)

    def prompt_fields(self, messages: Sequence[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
        system = [str(m.get("content", "")) for m in messages if m.get("role") == "system"]
        fields: dict[str, Any] = {
            MESSAGES: [m for m in messages if m.get("role") != "system"],
            "max_tokens": max_tokens,
        }
        if system:
            fields["system"] = "\n\n".join(system)
        return fields

    def prompt_messages(self, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        system = body.get("system")
        found: list[Mapping[str, Any]] = []
        if isinstance(system, str | list):
            found.append({"role": "system", "content": message_text(system)})
        return found + super().prompt_messages(body)

    def event(self, stream: Stream, kind: bytes, data: bytes, at: float) -> None:
        chunk = load_event(kind, data)
        kind_name = chunk.get("type")
        if kind_name == "content_block_delta":
            _block(stream, chunk.get("delta"), at)
        elif kind_name == "content_block_start":
            _block(stream, chunk.get("content_block"), at)
        elif kind_name == "message_start":
            message = chunk.get("message")
            _usage(stream, message.get("usage") if isinstance(message, dict) else None)
        elif kind_name == "message_delta":
            _usage(stream, chunk.get("usage"))
            delta = chunk.get("delta")
            reason = stop_reason(delta.get("stop_reason") if isinstance(delta, dict) else None)
            if reason:
                stream.finish_reason = reason
        elif kind_name == "message_stop":
            stream.done = True

    def unary(self, stream: Stream, data: dict[str, Any]) -> None:
        content = data.get("content")
        if not isinstance(content, list):
            raise RequestFailed(ErrorClass.BAD_RESPONSE, "response has no `content` (reading the Messages body failed)")
        blocks = [b for b in content if isinstance(b, dict)]
        unary_parts(
            stream,
            [t for b in blocks if (t := text_of(b.get("thinking")))],
            [t for b in blocks if (t := text_of(b.get("text")))],
        )
        stream.finish_reason = stop_reason(data.get("stop_reason"))
        _usage(stream, data.get("usage"))


def _block(stream: Stream, block: object, at: float) -> None:
    """A text or thinking delta (or a block that starts with text already in it)."""
    if not isinstance(block, dict):
        return
    text = text_of(block.get("text"))
    if text is not None:
        stream._answer(at, chunk_tokens(text), text)
        return
    thinking = text_of(block.get("thinking"))
    if thinking is not None:
        stream._reasoning(at, chunk_tokens(thinking))


def _usage(stream: Stream, usage: object) -> None:
    """Anthropic usage: ``input_tokens`` leaves out the cache's reads and writes, so they are added back."""
    if not isinstance(usage, dict):
        return
    before = stream.usage or {}
    inputs = count(usage.get("input_tokens"))
    read = count(usage.get("cache_read_input_tokens"))
    written = count(usage.get("cache_creation_input_tokens")) or 0
    prompt = inputs + (read or 0) + written if inputs is not None else before.get("prompt_tokens")
    output = count(usage.get("output_tokens"))
    stream.usage = chat_usage(
        prompt,
        output if output is not None else before.get("completion_tokens"),
        read if read is not None else (before.get("prompt_tokens_details") or {}).get("cached_tokens"),
        None,
    )
