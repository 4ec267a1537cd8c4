"""The four APIs the simulator speaks: each one's request fields, stream events and error bodies.

The timing model is one (the engine decides when tokens exist); only the wire differs, so a
client driven through chat, completions, Responses or Anthropic Messages against the same
fixed engine must measure the same TTFT and ITL, and the same tokens. Event shapes follow
what vLLM 0.32 sends (``vllm/entrypoints/openai`` and ``vllm/entrypoints/anthropic``): chat
reasoning in ``delta.reasoning``, Responses' ``response.reasoning_text.delta`` before
``response.output_text.delta`` and usage in ``response.completed``, Messages' ``thinking``
block before the ``text`` block and usage in ``message_start``/``message_delta``. The
completions API has no reasoning channel: a reasoning share is sent as plain text there.

One :class:`Dialect` serves one request: it holds the few things an event depends on
(Responses' sequence numbers, Messages' open block).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from attnload.measure.tokens import body_messages

ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error"}
"""Anthropic's error ``type`` per status (429: ``rate_limit_error``; others ``api_error``)."""


def validate(api: str, body: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(code, message)`` of what is wrong with a request of ``api``, or None."""
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "missing_model", "`model` is required"
    if api in ("chat", "messages"):
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            return "missing_messages", "`messages` must be a non-empty list of message objects"
    else:
        field = "prompt" if api == "completions" else "input"
        if not isinstance(body.get(field), str | list) or not body[field]:
            return f"missing_{field}", f"`{field}` must be a non-empty string or list"
    if api == "messages" and body.get("max_tokens") is None:
        return "missing_max_tokens", "`max_tokens` is required"
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            return "invalid_max_tokens", f"`{name}` must be a positive integer"
    return None


def prompt_messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The prompt as chat messages, whichever API's field holds it (counted and hashed as chat's)."""
    return body_messages(body)


def max_tokens(body: Mapping[str, Any]) -> int | None:
    value = body.get("max_completion_tokens") or body.get("max_tokens") or body.get("max_output_tokens")
    return value if isinstance(value, int) else None


def error(api: str, status: int, kind: str, code: str, message: str) -> web.Response:
    """An error reply as ``api`` words it: OpenAI's ``{"error": {...}}``, or Anthropic's typed one."""
    if api == "messages":
        anthropic = "rate_limit_error" if status == 429 else ANTHROPIC_ERRORS.get(status, "api_error")
        body: dict[str, Any] = {"type": "error", "error": {"type": anthropic, "message": message}}
    else:
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return web.json_response(body, status=status)


class Dialect:
    """The events of one streamed answer in one API (``start``, ``delta``, ``tail``) and its unary body."""

    def __init__(self, api: str, call_id: str, created: int, model: str) -> None:
        self.api = api
        self.call_id = call_id
        self.created = created
        self.model = json.dumps(model)
        self.sequence = 0
        """Responses: the next event's ``sequence_number``."""
        self.block: str | None = None
        """Messages and Responses: the kind of output open now (``reasoning`` or ``answer``)."""
        self.index = -1
        if api == "chat":
            self.prefix = (
                f'data: {{"id":"{call_id}","object":"chat.completion.chunk","created":{created},'
                f'"model":{self.model},"choices":[{{"index":0,"delta":'
            )
        elif api == "completions":
            self.prefix = (
                f'data: {{"id":"{call_id}","object":"text_completion","created":{created},'
                f'"model":{self.model},"choices":[{{"index":0,"text":'
            )
        else:
            self.prefix = ""

    def _event(self, kind: str, data: dict[str, Any]) -> str:
        if self.api == "responses":
            data["sequence_number"] = self.sequence
            self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"

    def start(self, prompt_tokens: int, cached: int) -> str:
        """What is written at admission, before any token (never a token itself)."""
        if self.api == "chat":
            return self.prefix + '{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
        if self.api == "responses":
            shell = self._response("in_progress", None, 0)
            return self._event("response.created", {"type": "response.created", "response": shell}) + self._event(
                "response.in_progress", {"type": "response.in_progress", "response": shell}
            )
        if self.api == "messages":
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
        return ""

    def stateless(self, reasoning: bool) -> bool:
        """Whether the next delta of this kind is the same bytes whenever its text is (so it can be cached)."""
        if self.api in ("chat", "completions"):
            return True
        return self.api == "messages" and self.block == ("reasoning" if reasoning else "answer")

    def delta(self, text: str, reasoning: bool) -> str:
        """One token group as this API streams it (reasoning in the API's reasoning field)."""
        if self.api == "chat":
            field = "reasoning" if reasoning else "content"
            return self.prefix + '{"' + field + '":"' + text + '"},"finish_reason":null}]}\n\n'
        if self.api == "completions":
            return self.prefix + '"' + text + '","logprobs":null,"finish_reason":null,"stop_reason":null}]}\n\n'
        opened = self._open("reasoning" if reasoning else "answer")
        if self.api == "messages":
            delta = {"type": "thinking_delta", "thinking": text} if reasoning else {"type": "text_delta", "text": text}
            return opened + self._event(
                "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}
            )
        kind = "response.reasoning_text.delta" if reasoning else "response.output_text.delta"
        data: dict[str, Any] = {"content_index": 0, "delta": text, "item_id": self._item(), "output_index": self.index}
        if not reasoning:
            data["logprobs"] = []
        data["type"] = kind
        return opened + self._event(kind, data)

    def _item(self) -> str:
        return ("rs_" if self.block == "reasoning" else "msg_") + self.call_id[-24:]

    def _open(self, block: str) -> str:
        """Messages: stop the open block and start one of ``block``'s kind; Responses: add an output item."""
        if self.block == block:
            return ""
        out = self._close()
        self.block, self.index = block, self.index + 1
        if self.api == "messages":
            content = {"type": "thinking", "thinking": ""} if block == "reasoning" else {"type": "text", "text": ""}
            return out + self._event(
                "content_block_start", {"type": "content_block_start", "index": self.index, "content_block": content}
            )
        item_type = "reasoning" if block == "reasoning" else "message"
        item = {"id": self._item(), "type": item_type, "status": "in_progress", "content": []}
        return out + self._event(
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": self.index, "item": item},
        )

    def _close(self) -> str:
        if self.block is None:
            return ""
        if self.api == "messages":
            return self._event("content_block_stop", {"type": "content_block_stop", "index": self.index})
        return self._event(
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": self.index, "item": {"id": self._item()}},
        )

    def tail(self, usage: dict[str, Any] | None, prompt: int, cached: int, output: int, reasoning: int) -> str:
        """What ends the stream: the finish (the output limit), usage where the API sends it, the end event."""
        if self.api == "chat":
            tail = self.prefix + '{},"finish_reason":"length"}]}\n\n'
            if usage is not None:
                tail += (
                    f'data: {{"id":"{self.call_id}","object":"chat.completion.chunk","created":{self.created},'
                    f'"model":{self.model},"choices":[],"usage":{json.dumps(usage)}}}\n\n'
                )
            return tail + "data: [DONE]\n\n"
        if self.api == "completions":
            tail = self.prefix + '"","logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n'
            if usage is not None:
                tail += (
                    f'data: {{"id":"{self.call_id}","object":"text_completion","created":{self.created},'
                    f'"model":{self.model},"choices":[],"usage":{json.dumps(usage)}}}\n\n'
                )
            return tail + "data: [DONE]\n\n"
        out = self._close()
        if self.api == "messages":
            delta = {"stop_reason": "max_tokens", "stop_sequence": None}
            out += self._event(
                "message_delta",
                {"type": "message_delta", "delta": delta, "usage": _anthropic_usage(prompt, cached, output)},
            )
            return out + self._event("message_stop", {"type": "message_stop"})
        final = self._response("incomplete", _responses_usage(prompt, cached, output, reasoning), output)
        return out + self._event("response.completed", {"type": "response.completed", "response": final})

    def _response(self, status: str, usage: dict[str, Any] | None, output: int) -> dict[str, Any]:
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
        """The non-streamed answer's body."""
        output = chat_usage["completion_tokens"]
        if self.api == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if thought:
                message["reasoning"] = thought
            choice = {"index": 0, "message": message, "finish_reason": "length"}
            return _openai("chat.completion", self, [choice], chat_usage)
        if self.api == "completions":
            choice = {"index": 0, "text": thought + text, "logprobs": None, "finish_reason": "length"}
            return _openai("text_completion", self, [choice], chat_usage)
        if self.api == "messages":
            blocks = ([{"type": "thinking", "thinking": thought}] if thought else []) + [{"type": "text", "text": text}]
            return {
                "id": self.call_id,
                "type": "message",
                "role": "assistant",
                "model": json.loads(self.model),
                "content": blocks,
                "stop_reason": "max_tokens",
                "stop_sequence": None,
                "usage": _anthropic_usage(prompt, cached, output),
            }
        body = self._response("incomplete", _responses_usage(prompt, cached, output, reasoning), output)
        items: list[dict[str, Any]] = []
        if thought:
            items.append({"type": "reasoning", "content": [{"type": "reasoning_text", "text": thought}], "summary": []})
        items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
        body["output"] = items
        return body


def _openai(kind: str, dialect: Dialect, choices: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": dialect.call_id,
        "object": kind,
        "created": dialect.created,
        "model": json.loads(dialect.model),
        "choices": choices,
        "usage": usage,
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
