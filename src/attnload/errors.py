"""Error classes shared by the client, the CLI and reports.

Hierarchy::

    UsageError            bad user input (config, flags, env): the CLI prints one line, exit 2
    RequestFailed         one request failed; carries an ErrorClass (the `error` label)

Foreign exceptions are mapped into these at one boundary each (config loading,
``client.classify.classify_exception``); nothing downstream inspects foreign types.
"""

from __future__ import annotations

import re
from enum import Enum, unique
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

ModelT = TypeVar("ModelT", bound=BaseModel)


@unique  # two equal hints would silently merge two classes
class ErrorClass(Enum):
    """The error classes of docs/design.md; ``name.lower()`` is the metric label and the results key."""

    AUTH = "check the key in the env var named by api_key_env (complete, no spaces, not expired)"
    NOT_FOUND = (
        "check the model id (exact, case-sensitive) against the provider's or gateway's model list"
        " (GET /models), and drop a trailing /v1 from base_url"
    )
    RATE_LIMITED = "lower --users or the --shape rate, or raise the provider's rate limit"
    QUOTA = "the account is out of quota or balance: top it up in the provider's console"
    CONTEXT_LENGTH = "the prompt plus max_tokens exceeds the model's context window: shorten it"
    BAD_REQUEST = "the server rejected the request body: check model parameters in the config"
    SERVER = "the server failed (5xx): retry later or lower the load"
    TIMEOUT = "raise [request] timeout (e.g. 120 s) or lower max_tokens"
    CONNECTION = "the endpoint refused or reset the connection: check base_url and that the server is up"
    PROXY = "a proxy env var is set and the proxy failed: unset HTTP_PROXY/HTTPS_PROXY/ALL_PROXY or fix it"
    PROXY_AUTH = (
        "the proxy refused its login (407, or a proxy's own 401): give its user and password in the proxy "
        "variable (HTTPS_PROXY/HTTP_PROXY) as USER:PASSWORD@ before the proxy's host, percent-encoding @ : / "
        "in them, or add the host to NO_PROXY"
    )
    BAD_RESPONSE = "the response is not OpenAI-shaped (no choices): check base_url and the model id"
    TRUNCATED = "the output stopped early: raise max_tokens, or the server cut the stream"
    CANCELLED = "the test stopped while this request was in flight (not a server fault)"

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str) -> ErrorClass:
        return cls[label.upper()]


class UsageError(Exception):
    """A user input problem: printed as one line by the CLI, exit status 2."""


class RequestFailed(Exception):
    """A classified request failure; ``detail`` is redacted before it is stored."""

    def __init__(self, kind: ErrorClass, detail: str, retry_after_s: float | None = None) -> None:
        self.kind = kind
        self.detail = redact(detail)
        self.retry_after_s = retry_after_s
        """A 429's ``Retry-After`` in seconds, kept so a client may back off before its next request."""
        self.body: str | None = None
        """What the server sent with the failure, redacted and cut to ``BODY_EXAMPLE_BYTES`` (None: no body)."""
        super().__init__(f"{kind.label}: {self.detail}. Fix: {kind.value}")


# Each pattern keeps group "keep" (a label such as "Authorization: ") and masks the rest.
_SECRET_PATTERNS = (
    re.compile(r"(?i)(?P<keep>authorization\s*[:=]\s*(?:bearer\s+)?)[^\s,;'\"]+"),
    re.compile(r"(?i)(?P<keep>bearer\s+)[A-Za-z0-9._\-~+/=]{6,}"),
    re.compile(r"(?P<keep>)\bsk-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"(?i)(?P<keep>(?:api[_-]?key|access[_-]?token|secret)[\"']?\s*[:=]\s*[\"']?)[^\s,;'\"&]+"),
    re.compile(r"(?P<keep>://[^/\s:@]+:)[^@\s/]+(?=@)"),  # the password of a proxy URL (user:pass@host)
)
_registered_secrets: set[str] = set()


def register_secret(value: str) -> None:
    """Remember a secret (an API key read from the env) so ``redact`` removes it anywhere."""
    if len(value) >= 4:
        _registered_secrets.add(value)


def redact(text: str) -> str:
    """Remove registered secrets and anything key-shaped from ``text``."""
    for secret in _registered_secrets:
        if secret in text:
            text = text.replace(secret, "***")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: m.group("keep") + "***", text)
    return text


BODY_EXAMPLE_BYTES = 300
"""An error body kept as an example is cut to this many bytes (after redaction, so no key is cut in two)."""
_BODY_READ_BYTES = 4096


def body_excerpt(body: bytes) -> str | None:
    """The start of an error response's body as text: redacted first, then cut to ``BODY_EXAMPLE_BYTES``
    (on a character boundary); None for an empty body."""
    if not body:
        return None
    text = redact(body[:_BODY_READ_BYTES].decode("utf-8", errors="replace"))
    return text.encode()[:BODY_EXAMPLE_BYTES].decode("utf-8", errors="ignore")


def describe_validation(exc: Any, *, prefer_unknown_key: bool = False) -> tuple[str, str, dict[str, Any]]:
    """The one mapping of a pydantic ``ValidationError`` to words: ``(dotted location, message, error)``.

    The first error is reported, or with ``prefer_unknown_key`` an unknown key first (a misspelled
    key also makes the real key "missing": the typo is the cause). Callers build their
    :class:`UsageError` from it, naming their file.
    """
    errors = exc.errors()
    error = errors[0]
    if prefer_unknown_key:
        error = next((e for e in errors if e["type"] == "extra_forbidden"), error)
    where = ".".join(str(part) for part in error["loc"])
    return where, str(error["msg"]).removeprefix("Value error, "), error


def validated(model: type[ModelT], data: object, source: object, advice: str = "") -> ModelT:
    """``data`` as ``model``; the first problem is a one-line :class:`UsageError`,
    ``{source}: {where}: {message}{advice}``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        where, message, _error = describe_validation(exc)
        raise UsageError(f"{source}: {where}: {message}{advice}") from None
