"""OpenAI's Responses API: named events (``response.output_text.delta``, reasoning text and summary
deltas, ``response.completed`` with usage), numbered by ``sequence_number``; field names as vLLM 0.32
streams them (``entrypoints/openai``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attnload.apis.base import (
    Api,
    ErrorEvent,
    Stream,
    chat_usage,
    count,
    detail,
    load_event,
    stop_reason,
    text_of,
    unary_parts,
)
from attnload.errors import ErrorClass, RequestFailed
from attnload.measure.tokens import chunk_tokens

_REASONING = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
_END = ("response.completed", "response.incomplete")


class Responses(Api):
    """``POST /v1/responses``: the messages as ``input``, the limit as ``max_output_tokens``."""

    end = "response.completed"
    path_tail = "/responses"

    def prompt_fields(self, messages: Sequence[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
        return {"input": list(messages), "max_output_tokens": max_tokens}

    def prompt_messages(self, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        prompt = body.get("input")
        if isinstance(prompt, str):
            return [{"role": "user", "content": prompt}]
        return [m for m in prompt if isinstance(m, Mapping)] if isinstance(prompt, list) else []

    def event(self, stream: Stream, kind: bytes, data: bytes, at: float) -> None:
        chunk = load_event(kind, data)
        kind_name = chunk.get("type")
        if kind_name == "response.output_text.delta":
            text = text_of(chunk.get("delta"))
            if text is not None:
                stream._answer(at, chunk_tokens(text), text)
        elif kind_name in _REASONING:
            text = text_of(chunk.get("delta"))
            if text is not None:
                stream._reasoning(at, chunk_tokens(text))
        elif kind_name in _END:
            response = chunk.get("response")
            _final(stream, response if isinstance(response, dict) else {})
            stream.done = True
        elif kind_name == "response.failed":
            response = chunk.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            raise ErrorEvent(error or "the response failed (response.failed)")

    def unary(self, stream: Stream, data: dict[str, Any]) -> None:
        output = data.get("output")
        if not isinstance(output, list):
            raise RequestFailed(ErrorClass.BAD_RESPONSE, "response has no `output` (reading the Responses body failed)")
        reasoning: list[str] = []
        answer: list[str] = []
        for item in output:
            if not isinstance(item, dict):
                continue
            parts = [p for p in (item.get("content") or []) + (item.get("summary") or []) if isinstance(p, dict)]
            texts = [t for p in parts if (t := text_of(p.get("text")))]
            (reasoning if item.get("type") == "reasoning" else answer).extend(texts)
        unary_parts(stream, reasoning, answer)
        _final(stream, data)


def _final(stream: Stream, response: dict[str, Any]) -> None:
    """The final response object: usage in chat's shape, and whether the output limit ended it."""
    usage = response.get("usage")
    if isinstance(usage, dict):
        stream.usage = chat_usage(
            count(usage.get("input_tokens")),
            count(usage.get("output_tokens")),
            detail(usage.get("input_tokens_details"), "cached_tokens"),
            detail(usage.get("output_tokens_details"), "reasoning_tokens"),
        )
    incomplete = response.get("incomplete_details")
    if response.get("status") == "incomplete" and isinstance(incomplete, dict):
        stream.finish_reason = stop_reason(incomplete.get("reason")) or "None"
