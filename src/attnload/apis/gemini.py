"""Google's Gemini API, ``streamGenerateContent`` with ``alt=sse``.

``POST {root}/v1beta/models/{model}:streamGenerateContent?alt=sse`` with the key in
``x-goog-api-key``; the body holds ``contents`` (``role`` user or model, ``parts`` of
``text``), the system prompt apart in ``systemInstruction`` and the output limit in
``generationConfig.maxOutputTokens``. Each ``data:`` chunk carries
``candidates[0].content.parts[]``: a part with ``thought: true`` is reasoning (timed as an
output token, counted apart), any other text is the answer. ``usageMetadata`` counts the
prompt (``promptTokenCount``, cache reads in ``cachedContentTokenCount``), the answer
(``candidatesTokenCount``) and the reasoning (``thoughtsTokenCount``) apart, so the output is
their sum. The chunk with ``finishReason`` is the last; the stream then closes (no end event).
Errors are ``{"error": {"code", "status", "message"}}`` with Google's canonical status names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from attnload.apis.base import Api, Stream, chat_usage, count, load_event, stop_reason, text_of, unary_parts
from attnload.errors import ErrorClass, RequestFailed
from attnload.measure.tokens import chunk_tokens, message_text

_ROLES = {"assistant": "model", "model": "assistant"}
"""Chat's role and Gemini's for the model's turns (both ways); every other turn is ``user``."""
_STATUSES = {
    "NOT_FOUND": ErrorClass.NOT_FOUND,
    "RESOURCE_EXHAUSTED": ErrorClass.RATE_LIMITED,
    "PERMISSION_DENIED": ErrorClass.AUTH,
    "UNAUTHENTICATED": ErrorClass.AUTH,
    "INVALID_ARGUMENT": ErrorClass.BAD_REQUEST,
    "FAILED_PRECONDITION": ErrorClass.BAD_REQUEST,
    "DEADLINE_EXCEEDED": ErrorClass.TIMEOUT,
    "INTERNAL": ErrorClass.SERVER,
    "UNAVAILABLE": ErrorClass.SERVER,
}
_QUOTA_WORDS = ("quota", "billing")
_CONTEXT_WORDS = ("token count", "maximum number of tokens", "token limit", "context")


class Gemini(Api):
    """``streamGenerateContent``: the model in the path, ``contents``/``parts`` bodies, thought parts."""

    end = "a chunk with finishReason"
    needs_key = True

    def path(self, model_id: str) -> str:
        return f"/v1beta/models/{model_id}:streamGenerateContent?alt=sse"

    def headers(self, api_key: str | None, key_header: str | None = None) -> str:
        return f"{key_header or 'x-goog-api-key'}: {api_key}\r\n" if api_key else ""

    def body(
        self,
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
        """The model is in the path and streaming in the method, so neither is in the body."""
        system = [message_text(m.get("content", "")) for m in messages if m.get("role") == "system"]
        body: dict[str, Any] = {
            "contents": [
                {
                    "role": _ROLES.get(str(m.get("role")), "user"),
                    "parts": [{"text": message_text(m.get("content", ""))}],
                }
                for m in messages
                if m.get("role") != "system"
            ],
            "generationConfig": {"maxOutputTokens": max_tokens, "temperature": temperature},
        }
        if system:
            body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
        return body

    def streams(self, body: Mapping[str, Any]) -> bool:
        return True

    def max_tokens(self, body: Mapping[str, Any]) -> int:
        config = body.get("generationConfig")
        value = config.get("maxOutputTokens") if isinstance(config, Mapping) else None
        return value if isinstance(value, int) else 0

    def prompt_messages(self, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        found: list[Mapping[str, Any]] = []
        system = body.get("systemInstruction")
        if isinstance(system, Mapping):
            found.append({"role": "system", "content": _parts_text(system.get("parts"))})
        for turn in body.get("contents") or []:
            if isinstance(turn, Mapping):
                role = _ROLES.get(str(turn.get("role")), "user")
                found.append({"role": role, "content": _parts_text(turn.get("parts"))})
        return found

    def event(self, stream: Stream, kind: bytes, data: bytes, at: float) -> None:
        chunk = load_event(kind, data)
        _usage(stream, chunk.get("usageMetadata"))
        candidate = _candidate(chunk)
        content = candidate.get("content")
        for part in (content.get("parts") if isinstance(content, dict) else None) or []:
            text = text_of(part.get("text")) if isinstance(part, dict) else None
            if text is None:
                continue
            if part.get("thought") is True:
                stream._reasoning(at, chunk_tokens(text))
            else:
                stream._answer(at, chunk_tokens(text), text)
        reason = candidate.get("finishReason")
        if reason:
            stream.finish_reason = stop_reason(reason)
            stream.done = True

    def unary(self, stream: Stream, data: dict[str, Any]) -> None:
        candidate = _candidate(data)
        content = candidate.get("content")
        parts = [p for p in (content.get("parts") if isinstance(content, dict) else None) or [] if isinstance(p, dict)]
        unary_parts(
            stream,
            [t for p in parts if p.get("thought") is True and (t := text_of(p.get("text")))],
            [t for p in parts if p.get("thought") is not True and (t := text_of(p.get("text")))],
        )
        stream.finish_reason = stop_reason(candidate.get("finishReason"))
        _usage(stream, data.get("usageMetadata"))

    def error_class(self, status: int, error: Mapping[str, Any], message: str) -> ErrorClass | None:
        kind = _STATUSES.get(str(error.get("status") or ""))
        text = message.lower()
        if kind is ErrorClass.RATE_LIMITED and any(w in text for w in _QUOTA_WORDS):
            return ErrorClass.QUOTA
        if kind is ErrorClass.BAD_REQUEST and any(w in text for w in _CONTEXT_WORDS):
            return ErrorClass.CONTEXT_LENGTH
        if kind is None and isinstance(error.get("status"), str) and status >= 500:
            return ErrorClass.SERVER
        return kind


def _candidate(chunk: Mapping[str, Any]) -> dict[str, Any]:
    """``candidates[0]`` ({} for a usage-only chunk)."""
    candidates = chunk.get("candidates")
    if candidates is None:
        return {}
    if not isinstance(candidates, list) or (candidates and not isinstance(candidates[0], dict)):
        raise RequestFailed(ErrorClass.BAD_RESPONSE, "`candidates` is not a list of objects")
    return candidates[0] if candidates else {}


def _parts_text(parts: object) -> str:
    return message_text(parts) if isinstance(parts, list) else ""


def _usage(stream: Stream, usage: object) -> None:
    """``usageMetadata`` in chat's shape: the output is the answer's and the reasoning's tokens together."""
    if not isinstance(usage, dict):
        return
    answer = count(usage.get("candidatesTokenCount"))
    thoughts = count(usage.get("thoughtsTokenCount"))
    output = None if answer is None and thoughts is None else (answer or 0) + (thoughts or 0)
    stream.usage = chat_usage(
        count(usage.get("promptTokenCount")), output, count(usage.get("cachedContentTokenCount")), thoughts
    )
