"""Map failed responses and foreign exceptions to the error classes of docs/design.md, at one boundary.

HTTP statuses and error bodies (OpenAI JSON, gateway shapes, HTML pages, plain text) go
through ``classify_status``; an error object inside a 200 stream through
``classify_error_object``; socket, TLS and parser exceptions through ``classify_exception``.
Most specific first: quota and context-length wording beats the status code, because
gateways answer both with 400/429.
"""

from __future__ import annotations

import json
import re
import ssl
import time
from typing import Any

import gevent.socket
from geventhttpclient.response import HTTPParseError

from attnload.apis.base import Api
from attnload.errors import ErrorClass, RequestFailed, body_excerpt, redact

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
"""Terminal escape sequences: CSI (colours, cursor moves), OSC (titles, hyperlinks) and two-byte ones."""
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""C0/C1 controls, line separators and bidi overrides that would rewrite or reorder a terminal line."""


def printable(text: str) -> str:
    """``text`` with escape sequences removed and control characters turned into spaces.

    Why: error details quote the server (its status text, error message, a snippet of its
    body) and end up on the user's terminal and in reports; a hostile or broken server must
    not be able to clear the screen, recolour it, retitle the window or hide text there.
    """
    if text.isprintable():
        return text
    return _CONTROL.sub(" ", _ANSI.sub("", text))


def classify_status(status: int, body: bytes, retry_after: str | None = None, api: Api | None = None) -> RequestFailed:
    """Map an HTTP error status and its body (OpenAI or gateway JSON, HTML, text) to a class; ``api`` reads
    its own error objects first (``Api.error_class``). The failure keeps the body's start (redacted,
    printable) as the example the results show."""
    failed = _classify_status(status, body, retry_after, api)
    excerpt = body_excerpt(body)
    failed.body = printable(excerpt) if excerpt is not None else None
    return failed


def _classify_status(status: int, body: bytes, retry_after: str | None, api: Api | None) -> RequestFailed:
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, list) and error:  # some gateways send {"error": [{...}]}
            error = error[0]
        if isinstance(error, dict | str):
            return classify_error_object(error, status, retry_after, api)
    if isinstance(data, list) and data and isinstance(data[0], dict):  # {"errors"}-style arrays at the top
        return classify_error_object(data[0].get("error", data[0]), status, retry_after, api)
    return _by_status(status, _text_of(body), "", retry_after)


def classify_error_object(
    error: Any, status: int, retry_after: str | None = None, api: Api | None = None
) -> RequestFailed:
    """OpenAI ``{"error": {message, type, code}}`` and gateway shapes (``detail``, ``msg``, ``errors``);
    ``api`` may class its own error objects (``Api.error_class``: canonical status names)."""
    if isinstance(error, dict):
        inner = error.get("error")
        if isinstance(inner, dict):  # Anthropic-style {"type": "error", "error": {...}}
            error = inner
        message = _message_of(error)
        code = " ".join(str(error.get(k) or "") for k in ("code", "type", "status", "reason"))
        status = _int(error.get("status_code") or error.get("code") or error.get("status")) or status
        kind = api.error_class(status, error, message) if api is not None else None
        if kind is not None:
            wait_s = _retry_after_s(retry_after) if kind is ErrorClass.RATE_LIMITED else None
            return RequestFailed(kind, _by_status(status, message[:300], code, retry_after).detail, wait_s)
    else:
        message, code = str(error), ""
    return _by_status(status, message[:300], code, retry_after)


def _message_of(error: dict[str, Any]) -> str:
    """The human text of an error object; a nested object (LiteLLM before it stringified
    ``detail``: ``{"message": {"error": "..."}}``) is unwrapped one level."""
    message: Any = error.get("message") or error.get("msg") or error.get("detail") or error.get("error") or ""
    if not message and isinstance(error.get("errors"), list) and error["errors"]:
        message = error["errors"][0]
    if isinstance(message, dict):
        message = message.get("error") or message.get("message") or message.get("detail") or message
    return str(message)


_QUOTA_WORDS = ("insufficient_quota", "quota", "balance", "billing", "credit", "余额")
_CONTEXT_WORDS = (
    "context_length",
    "context length",
    "maximum context",
    "context window",
    "is too long",
    "too many tokens",
    "max_tokens is too large",
    "reduce the length",
)
_AUTH_WORDS = ("invalid_api_key", "invalid api key", "unauthorized", "authentication", "incorrect api key")
_NOT_FOUND_WORDS = (
    "model_not_found",
    "model not found",
    "does not exist",
    "no such model",
    "unknown model",
    "deploymentnotfound",
    "not_found_error",
    "invalid model name",
    "not a valid model",
    "invalid model id",
)
"""A wrong model id, however the server words it: OpenAI and vLLM ("does not exist"), LiteLLM's proxy
(HTTP 400, "Invalid model name passed in model=..."), OpenRouter-style ("is not a valid model ID")."""
_RATE_WORDS = ("rate_limit", "rate limit", "too many requests")
_TOOL_CHOICE_WORDS = ("enable-auto-tool-choice", "tool-call-parser", '"auto" tool choice requires')
"""vLLM's 400 to a request that carries ``tools`` with the default (auto) tool choice when the server was
started without tool-call parsing: ``"auto" tool choice requires --enable-auto-tool-choice and
--tool-call-parser to be set``."""
TOOL_CHOICE_FIX = (
    "the server does not parse tool calls: start vLLM with --enable-auto-tool-choice --tool-call-parser "
    "<parser for the model, e.g. hermes or llama3_json>, or set the profile's agent.tool_choice to none"
)


def _by_status(status: int, message: str, code: str, retry_after: str | None) -> RequestFailed:
    message, code = printable(message), printable(code)
    text = f"{code} {message}".lower()
    detail = f"HTTP {status}: {message or code or 'no details'}".strip()
    wait_s = _retry_after_s(retry_after)
    if retry_after:
        detail += f" (Retry-After {printable(retry_after[:40])})"
    if status == 407:  # Proxy Authentication Required: only a proxy sends it, whatever its page says
        return RequestFailed(ErrorClass.PROXY_AUTH, detail)
    if status == 402 or any(w in text for w in _QUOTA_WORDS):
        return RequestFailed(ErrorClass.QUOTA, detail)
    if any(w in text for w in _CONTEXT_WORDS):
        return RequestFailed(ErrorClass.CONTEXT_LENGTH, detail)
    if status in (401, 403) or any(w in text for w in _AUTH_WORDS):
        return RequestFailed(ErrorClass.AUTH, detail)
    if status == 404 or any(w in text for w in _NOT_FOUND_WORDS):
        return RequestFailed(ErrorClass.NOT_FOUND, detail)
    if status == 429 or any(w in text for w in _RATE_WORDS):
        return RequestFailed(ErrorClass.RATE_LIMITED, detail, retry_after_s=wait_s)
    if status in (408, 504, 524):
        return RequestFailed(ErrorClass.TIMEOUT, detail)
    if 300 <= status < 400:  # a redirect is never a chat completion: usually http vs https or a wrong path
        return RequestFailed(ErrorClass.BAD_RESPONSE, detail + " (redirect: check the scheme and path of base_url)")
    if 400 <= status < 500:
        if any(w in text for w in _TOOL_CHOICE_WORDS):
            detail += f" ({TOOL_CHOICE_FIX})"
        return RequestFailed(ErrorClass.BAD_REQUEST, detail)
    return RequestFailed(ErrorClass.SERVER, detail)  # 5xx, or an error object inside a 200 stream


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        from email.utils import parsedate_to_datetime

        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and 100 <= value <= 599 else None


def _text_of(body: bytes) -> str:
    text = body[:2000].decode("utf-8", errors="replace")
    if "<" in text:  # an HTML error page: keep its title
        start, end = text.lower().find("<title>"), text.lower().find("</title>")
        text = text[start + 7 : end] if 0 <= start < end else "HTML error page"
    return " ".join(text.split())[:200]


def classify_exception(exc: BaseException, via_proxy: bool) -> RequestFailed:
    """The one boundary where socket, TLS and parser exceptions become docs/design.md error classes."""
    if isinstance(exc, RequestFailed):
        return exc
    detail = redact(printable(f"{type(exc).__name__}: {exc}"))
    if isinstance(exc, TimeoutError | gevent.socket.timeout):
        return RequestFailed(ErrorClass.TIMEOUT, detail)
    if isinstance(exc, ConnectionError | OSError | ssl.SSLError):
        return RequestFailed(ErrorClass.PROXY if via_proxy else ErrorClass.CONNECTION, detail)
    if isinstance(exc, HTTPParseError):
        return RequestFailed(ErrorClass.BAD_RESPONSE, detail)
    return RequestFailed(ErrorClass.BAD_RESPONSE, detail)
