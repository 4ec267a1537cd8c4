"""The APIs the simulator speaks, one dialect each: request fields, routes, stream events and error bodies.

The timing model is one (the engine decides when tokens exist); only the wire differs, so a
client driven through any API against the same fixed engine must measure the same TTFT and
ITL, and the same tokens. Event shapes follow what vLLM 0.32 sends (``vllm/entrypoints/openai``
and ``vllm/entrypoints/anthropic``): chat reasoning in ``delta.reasoning``, Responses'
``response.reasoning_text.delta`` before ``response.output_text.delta`` and usage in
``response.completed``, Messages' ``thinking`` block before the ``text`` block and usage in
``message_start``/``message_delta``; Gemini's ``streamGenerateContent?alt=sse`` chunks carry
``candidates[0].content.parts`` (reasoning as ``thought: true`` parts) and ``usageMetadata``,
the last one ``finishReason``. The completions API has no reasoning channel: a reasoning
share is sent as plain text there.

A :class:`Dialect` serves one request: it holds the few things an event depends on
(Responses' sequence numbers, Messages' open block). ``DIALECTS`` is the simulator's one
table of them; sim/serving/server.py routes each API from it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from aiohttp import web

from attnload.measure.tokens import message_text

_MAX_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


class Dialect:
    """One API's wire for one request: ``start``, ``delta``, ``tail``, the unary body; class-level, its routes
    and request reading. The defaults are OpenAI's."""

    prompt_field: ClassVar[str] = "messages"
    """Where the prompt sits in the body."""
    tail_path: ClassVar[str] = "/chat/completions"
    """The route after each OpenAI prefix (``/v1``, ``/api/v1``, ``/api``)."""
    id_prefix: ClassVar[str] = "chatcmpl-"
    always_usage: ClassVar[bool] = True
    """False: usage is streamed only when ``stream_options.include_usage`` asks for it."""
    reasoning_as_text: ClassVar[bool] = False

    def __init__(self, call_id: str, created: int, model: str) -> None:
        self.call_id = call_id
        self.created = created
        self.model = json.dumps(model)

    # ------------------------------------------------------------------ the request

    @classmethod
    def routes(cls, prefixes: tuple[str, ...]) -> list[str]:
        return [prefix + cls.tail_path for prefix in prefixes]

    @classmethod
    def model_of(cls, request: web.Request, body: Mapping[str, Any]) -> object:
        return body.get("model")

    @classmethod
    def streams(cls, body: Mapping[str, Any]) -> bool:
        return bool(body.get("stream"))

    @classmethod
    def validate(cls, body: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(code, message)`` of what is wrong with the prompt and limit of a request, or None."""
        field = cls.prompt_field
        value = body.get(field)
        if field == "messages":
            if not isinstance(value, list) or not value or not all(isinstance(m, dict) for m in value):
                return "missing_messages", "`messages` must be a non-empty list of message objects"
        elif not isinstance(value, str | list) or not value:
            return f"missing_{field}", f"`{field}` must be a non-empty string or list"
        for name in _MAX_FIELDS:
            limit = body.get(name)
            if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0):
                return "invalid_max_tokens", f"`{name}` must be a positive integer"
        return None

    @classmethod
    def prompt_messages(cls, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The prompt as chat messages (counted and hashed as chat's)."""
        found: list[Mapping[str, Any]] = []
        system = body.get("system")
        if isinstance(system, str | list):
            found.append({"role": "system", "content": message_text(system)})
        prompt = body.get(cls.prompt_field)
        if isinstance(prompt, str):
            return [{"role": "user", "content": prompt}]
        if isinstance(prompt, list):
            found += [m for m in prompt if isinstance(m, Mapping)]
        return found

    @classmethod
    def max_tokens(cls, body: Mapping[str, Any]) -> int | None:
        value = body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens")
        return value if isinstance(value, int) else None

    @classmethod
    def error(cls, status: int, kind: str, code: str, message: str) -> web.Response:
        """An error reply as the API words it (OpenAI's ``{"error": {...}}`` here)."""
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return web.json_response(body, status=status)

    # ------------------------------------------------------------------ the answer

    def start(self, prompt_tokens: int, cached: int) -> str:
        """What is written at admission, before any token (never a token itself)."""
        return ""

    def stateless(self, reasoning: bool) -> bool:
        """Whether the next delta of this kind is the same bytes whenever its text is (so it can be cached)."""
        return True

    def delta(self, text: str, reasoning: bool) -> str:
        """One token group as this API streams it (reasoning in the API's reasoning field)."""
        raise NotImplementedError

    def tail(self, usage: dict[str, Any] | None, prompt: int, cached: int, output: int, reasoning: int) -> str:
        """What ends the stream: the finish (the output limit), usage where the API sends it, the end event."""
        raise NotImplementedError

    def unary(
        self, chat_usage: dict[str, Any], thought: str, text: str, prompt: int, cached: int, reasoning: int
    ) -> dict[str, Any]:
        """The non-streamed answer's body."""
        raise NotImplementedError

    def _openai(self, kind: str, choices: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.call_id,
            "object": kind,
            "created": self.created,
            "model": json.loads(self.model),
            "choices": choices,
            "usage": usage,
        }

    def _openai_tail(self, kind: str, finish: str, usage: dict[str, Any] | None) -> str:
        tail = self.prefix + finish
        if usage is not None:
            tail += (
                f'data: {{"id":"{self.call_id}","object":"{kind}","created":{self.created},'
                f'"model":{self.model},"choices":[],"usage":{json.dumps(usage)}}}\n\n'
            )
        return tail + "data: [DONE]\n\n"

    prefix = ""
    """The bytes of a chat or completions chunk before its delta."""


class ChatDialect(Dialect):
    always_usage = False

    def __init__(self, call_id: str, created: int, model: str) -> None:
        super().__init__(call_id, created, model)
        self.prefix = (
            f'data: {{"id":"{call_id}","object":"chat.completion.chunk","created":{created},'
            f'"model":{self.model},"choices":[{{"index":0,"delta":'
        )

    def start(self, prompt_tokens: int, cached: int) -> str:
        return self.prefix + '{"role":"assistant","content":""},"finish_reason":null}]}\n\n'

    def delta(self, text: str, reasoning: bool) -> str:
        field = "reasoning" if reasoning else "content"
        return self.prefix + '{"' + field + '":"' + text + '"},"finish_reason":null}]}\n\n'

    def tail(self, usage: dict[str, Any] | None, prompt: int, cached: int, output: int, reasoning: int) -> str:
        return self._openai_tail("chat.completion.chunk", '{},"finish_reason":"length"}]}\n\n', usage)

    def unary(
        self, chat_usage: dict[str, Any], thought: str, text: str, prompt: int, cached: int, reasoning: int
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if thought:
            message["reasoning"] = thought
        return self._openai(
            "chat.completion", [{"index": 0, "message": message, "finish_reason": "length"}], chat_usage
        )


class CompletionsDialect(Dialect):
    prompt_field = "prompt"
    tail_path = "/completions"
    id_prefix = "cmpl-"
    always_usage = False
    reasoning_as_text = True

    def __init__(self, call_id: str, created: int, model: str) -> None:
        super().__init__(call_id, created, model)
        self.prefix = (
            f'data: {{"id":"{call_id}","object":"text_completion","created":{created},'
            f'"model":{self.model},"choices":[{{"index":0,"text":'
        )

    def delta(self, text: str, reasoning: bool) -> str:
        return self.prefix + '"' + text + '","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'

    def tail(self, usage: dict[str, Any] | None, prompt: int, cached: int, output: int, reasoning: int) -> str:
        finish = '"","logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n'
        return self._openai_tail("text_completion", finish, usage)

    def unary(
        self, chat_usage: dict[str, Any], thought: str, text: str, prompt: int, cached: int, reasoning: int
    ) -> dict[str, Any]:
        choice = {"index": 0, "text": thought + text, "logprobs": None, "finish_reason": "length"}
        return self._openai("text_completion", [choice], chat_usage)


class _Blocks(Dialect):
    """Named events around output blocks (Responses' output items, Messages' content blocks)."""

    def __init__(self, call_id: str, created: int, model: str) -> None:
        super().__init__(call_id, created, model)
        self.block: str | None = None
        """The kind of output open now (``reasoning`` or ``answer``)."""
        self.index = -1

    def _event(self, kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"

    def _open(self, block: str) -> str:
        """Stop the open block and start one of ``block``'s kind."""
        if self.block == block:
            return ""
        out = self._close()
        self.block, self.index = block, self.index + 1
        return out + self._opened(block)

    def _opened(self, block: str) -> str:
        raise NotImplementedError

    def _close(self) -> str:
        raise NotImplementedError


class ResponsesDialect(_Blocks):
    prompt_field = "input"
    tail_path = "/responses"
    id_prefix = "resp"

    def __init__(self, call_id: str, created: int, model: str) -> None:
        super().__init__(call_id, created, model)
        self.sequence = 0
        """The next event's ``sequence_number``."""

    def _event(self, kind: str, data: dict[str, Any]) -> str:
        data["sequence_number"] = self.sequence
        self.sequence += 1
        return super()._event(kind, data)

    def start(self, prompt_tokens: int, cached: int) -> str:
        shell = self._response("in_progress", None)
        return self._event("response.created", {"type": "response.created", "response": shell}) + self._event(
            "response.in_progress", {"type": "response.in_progress", "response": shell}
        )

    def stateless(self, reasoning: bool) -> bool:
        return False

    def delta(self, text: str, reasoning: bool) -> str:
        opened = self._open("reasoning" if reasoning else "answer")
        kind = "response.reasoning_text.delta" if reasoning else "response.output_text.delta"
        data: dict[str, Any] = {"content_index": 0, "delta": text, "item_id": self._item(), "output_index": self.index}
        if not reasoning:
            data["logprobs"] = []
        data["type"] = kind
        return opened + self._event(kind, data)

    def _item(self) -> str:
        return ("rs_" if self.block == "reasoning" else "msg_") + self.call_id[-24:]

    def _opened(self, block: str) -> str:
        item_type = "reasoning" if block == "reasoning" else "message"
        item = {"id": self._item(), "type": item_type, "status": "in_progress", "content": []}
        return self._event(
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": self.index, "item": item},
        )

    def _close(self) -> str:
        if self.block is None:
            return ""
        return self._event(
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": self.index, "item": {"id": self._item()}},
        )

    def tail(self, usage: dict[str, Any] | None, prompt: int, cached: int, output: int, reasoning: int) -> str:
        final = self._response("incomplete", _responses_usage(prompt, cached, output, reasoning))
        return self._close() + self._event("response.completed", {"type": "response.completed", "response": final})

    def _response(self, status: str, usage: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "id": "resp_" + self.call_id[-24:],
            "object": "response",
            "created_at": self.created,
            "model": json.loads(self.model),
            "status": status,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "error": None,
            "output": [],
            "usage": usage,
        }

    def unary(
        self, chat_usage: dict[str, Any], thought: str, text: str, prompt: int, cached: int, reasoning: int
    ) -> dict[str, Any]:
        body = self._response(
            "incomplete", _responses_usage(prompt, cached, chat_usage["completion_tokens"], reasoning)
        )
        items: list[dict[str, Any]] = []
        if thought:
            items.append({"type": "reasoning", "content": [{"type": "reasoning_text", "text": thought}], "summary": []})
        items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
        body["output"] = items
        return body


ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}
"""Anthropic's error ``type`` per status (429: ``rate_limit_error``; others ``api_error``)."""


class MessagesDialect(_Blocks):
    tail_path = "/messages"
    id_prefix = "msg_"

    @classmethod
    def validate(cls, body: Mapping[str, Any]) -> tuple[str, str] | None:
        if body.get("max_tokens") is None and isinstance(body.get("messages"), list) and body["messages"]:
            return "missing_max_tokens", "`max_tokens` is required"
        return super().validate(body)

    @classmethod
    def error(cls, status: int, kind: str, code: str, message: str) -> web.Response:
        anthropic = "rate_limit_error" if status == 429 else ANTHROPIC_ERRORS.get(status, "api_error")
        body = {"type": "error", "error": {"type": anthropic, "message": message}}
        return web.json_response(body, status=status)

    def start(self, prompt_tokens: int, cached: int) -> str:
        message = {
            "id": self.call_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": json.loads(self.model),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _anthropic_usage(prompt_tokens, cached, 0),
        }
        return self._event("message_start", {"type": "message_start", "message": message})

    def stateless(self, reasoning: bool) -> bool:
        return self.block == ("reasoning" if reasoning else "answer")

    def delta(self, text: str, reasoning: bool) -> str:
        opened = self._open("reasoning" if reasoning else "answer")
        delta = {"type": "thinking_delta", "thinking": text} if reasoning else {"type": "text_delta", "text": text}
        return opened + self._event(
            "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}
        )

    def _opened(self, block: str) -> str:
        content = {"type": "thinking", "thinking": ""} if block == "reasoning" else {"type": "text", "text": ""}
        return self._event(
            "content_block_start", {"type": "content_block_start", "index": self.index, "content_block": content}
        )

    def _close(self) -> str:
        if self.block is None:
            return ""
        return self._event("content_block_stop", {"type": "content_block_stop", "index": self.index})

    def tail(self, usage: dict[str, Any] | None, prompt: int, cached: int, output: int, reasoning: int) -> str:
        delta = {"stop_reason": "max_tokens", "stop_sequence": None}
        out = self._close() + self._event(
            "message_delta",
            {"type": "message_delta", "delta": delta, "usage": _anthropic_usage(prompt, cached, output)},
        )
        return out + self._event("message_stop", {"type": "message_stop"})

    def unary(
        self, chat_usage: dict[str, Any], thought: str, text: str, prompt: int, cached: int, reasoning: int
    ) -> dict[str, Any]:
        blocks = ([{"type": "thinking", "thinking": thought}] if thought else []) + [{"type": "text", "text": text}]
        return {
            "id": self.call_id,
            "type": "message",
            "role": "assistant",
            "model": json.loads(self.model),
            "content": blocks,
            "stop_reason": "max_tokens",
            "stop_sequence": None,
            "usage": _anthropic_usage(prompt, cached, chat_usage["completion_tokens"]),
        }


def _anthropic_usage(prompt: int, cached: int, output: int) -> dict[str, Any]:
    """Anthropic counts cache reads apart: ``input_tokens`` + ``cache_read_input_tokens`` = the prompt."""
    return {"input_tokens": max(0, prompt - cached), "cache_read_input_tokens": cached, "output_tokens": output}


def _responses_usage(prompt: int, cached: int, output: int, reasoning: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + output,
    }


_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}
"""Google's canonical status name per HTTP status (others: ``INTERNAL``)."""
_GEMINI_ROLES = {"model": "assistant"}


class GeminiDialect(Dialect):
    """``POST /v1beta/models/{model}:streamGenerateContent?alt=sse``: the model in the path, ``contents``
    of ``parts``, ``generationConfig.maxOutputTokens``; the stream ends after the ``finishReason`` chunk."""

    prompt_field = "contents"
    id_prefix = "gen-"

    @classmethod
    def routes(cls, prefixes: tuple[str, ...]) -> list[str]:
        return [root + "/v1beta/models/{model}:streamGenerateContent" for root in ("", "/api")]

    @classmethod
    def model_of(cls, request: web.Request, body: Mapping[str, Any]) -> object:
        return request.match_info.get("model")

    @classmethod
    def streams(cls, body: Mapping[str, Any]) -> bool:
        return True

    @classmethod
    def validate(cls, body: Mapping[str, Any]) -> tuple[str, str] | None:
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents or not all(isinstance(c, dict) for c in contents):
            return "missing_contents", "`contents` must be a non-empty list of content objects"
        limit = cls.max_tokens(body)
        config = body.get("generationConfig")
        if isinstance(config, dict) and config.get("maxOutputTokens") is not None and limit is None:
            return "invalid_max_tokens", "`generationConfig.maxOutputTokens` must be a positive integer"
        return None

    @classmethod
    def prompt_messages(cls, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        found: list[Mapping[str, Any]] = []
        system = body.get("systemInstruction")
        if isinstance(system, dict) and isinstance(system.get("parts"), list):
            found.append({"role": "system", "content": message_text(system["parts"])})
        for turn in body.get("contents") or []:
            if isinstance(turn, dict):
                parts = turn.get("parts")
                role = _GEMINI_ROLES.get(str(turn.get("role")), "user")
                found.append({"role": role, "content": message_text(parts) if isinstance(parts, list) else ""})
        return found

    @classmethod
    def max_tokens(cls, body: Mapping[str, Any]) -> int | None:
        config = body.get("generationConfig")
        value = config.get("maxOutputTokens") if isinstance(config, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None

    @classmethod
    def error(cls, status: int, kind: str, code: str, message: str) -> web.Response:
        body = {"error": {"code": status, "message": message, "status": _GEMINI_STATUS.get(status, "INTERNAL")}}
        return web.json_response(body, status=status)

    def delta(self, text: str, reasoning: bool) -> str:
        thought = ',"thought":true' if reasoning else ""
        return (
            'data: {"candidates":[{"content":{"parts":[{"text":"' + text + '"' + thought + '}],"role":"model"},'
            '"index":0}],"modelVersion":' + self.model + "}\r\n\r\n"
        )

    def tail(self, usage: dict[str, Any] | None, prompt: int, cached: int, output: int, reasoning: int) -> str:
        final = {
            "candidates": [
                {"content": {"parts": [{"text": ""}], "role": "model"}, "finishReason": "MAX_TOKENS", "index": 0}
            ],
            "usageMetadata": _gemini_usage(prompt, cached, output, reasoning),
            "modelVersion": json.loads(self.model),
            "responseId": self.call_id,
        }
        return f"data: {json.dumps(final, separators=(',', ':'))}\r\n\r\n"

    def unary(
        self, chat_usage: dict[str, Any], thought: str, text: str, prompt: int, cached: int, reasoning: int
    ) -> dict[str, Any]:
        parts = ([{"text": thought, "thought": True}] if thought else []) + [{"text": text}]
        return {
            "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "MAX_TOKENS", "index": 0}],
            "usageMetadata": _gemini_usage(prompt, cached, chat_usage["completion_tokens"], reasoning),
            "modelVersion": json.loads(self.model),
        }


def _gemini_usage(prompt: int, cached: int, output: int, reasoning: int) -> dict[str, Any]:
    """Gemini counts the answer and the reasoning apart: ``candidatesTokenCount`` + ``thoughtsTokenCount`` = output."""
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": output - reasoning, "totalTokenCount": prompt + output}
    if reasoning:
        usage["thoughtsTokenCount"] = reasoning
    if cached:
        usage["cachedContentTokenCount"] = cached
    return usage


DIALECTS: dict[str, type[Dialect]] = {
    "chat": ChatDialect,
    "completions": CompletionsDialect,
    "responses": ResponsesDialect,
    "messages": MessagesDialect,
    "gemini": GeminiDialect,
}
"""Every API the simulator serves, by the name the load generator's model key ``api`` gives it."""
