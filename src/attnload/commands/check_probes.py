"""The two requests of ``attnload check``: one through the openai SDK, one through attnload's load path.

The SDK probe is what users' scripts do (httpx, honouring the proxy variables); the raw probe is
what ``attnload run`` will do. Both are bounded (check_budget.py): a runaway or hostile reply
cannot hold the check past its total timeout or fill its memory. Each ends as a :class:`Probe`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl

from attnload.apis import request_body
from attnload.client.budget import max_events
from attnload.client.chat import ApiClient
from attnload.client.classify import classify_status
from attnload.client.proxy import proxy_refusal
from attnload.client.transport import Timeouts
from attnload.commands.check_budget import bounding_hook, max_probe_bytes
from attnload.errors import ErrorClass, RequestFailed

if TYPE_CHECKING:
    import httpx2
    import openai
    from openai.types.chat import ChatCompletionMessageParam


@dataclass
class Probe:
    """One request's outcome: OK with timings, or a classified failure."""

    ok: bool
    error: str | None = None
    detail: str = ""
    ttft_s: float | None = None
    tokens: int | None = None
    finish_reason: str | None = None

    @classmethod
    def failed(cls, failure: RequestFailed) -> Probe:
        return cls(ok=False, error=failure.kind.label, detail=failure.detail)


SLOW_FIRST_S = 10.0
"""A first request at least this long (seconds) ..."""
FAST_LATER_S = 1.0
"""... followed by one within this is a server or gateway warming up, not a slow endpoint."""


def slow_first_note(first_s: float, later_s: float) -> str | None:
    """The note for a first request far slower than the next: a gateway or server warming up (LiteLLM
    offline looks ~23 s per request for a tokenizer on the internet until ``HF_HUB_OFFLINE=1``)."""
    if first_s < SLOW_FIRST_S or later_s >= FAST_LATER_S:
        return None
    return (
        f"the first request was slow: a gateway or server warming up ({first_s:.1f} s, the next {later_s:.2f} s); "
        "a run's first TTFTs will show it. LiteLLM offline: set HF_HUB_OFFLINE=1 and LITELLM_LOCAL_MODEL_COST_MAP=True "
        "where it runs (docs/troubleshooting.md)"
    )


@dataclass
class ProxyInfo:
    """Proxy variables as set (passwords redacted), and the one each client would use for this URL."""

    variables: dict[str, str]
    sdk_proxy: str | None = None
    sdk_proxy_var: str | None = None
    sdk_proxy_reachable: bool | None = None
    load_path_proxy: str | None = None


def sdk_probe(
    base_url: str,
    key: str | None,
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    timeouts: Timeouts,
    proxy: ProxyInfo,
    access: Access | None = None,
) -> Probe:
    """One streaming request through the openai SDK (httpx honours the proxy variables).

    Bounded (check_budget.py): body bytes and events are capped and ``total_s`` is a deadline
    for the whole reply, checked at every read, not only between parsed chunks.
    """
    import httpx2
    import openai

    read_s = min(timeouts.idle_s, timeouts.ttft_s or timeouts.total_s, timeouts.total_s)
    timeout = httpx2.Timeout(read_s, connect=timeouts.connect_s)
    started = time.perf_counter()
    hook = bounding_hook(started + timeouts.total_s, max_probe_bytes(max_tokens), timeouts.total_s)
    client = sdk_client(base_url, key, timeout, hook, access)
    try:
        stream = client.chat.completions.create(
            model=model,
            messages=cast("list[ChatCompletionMessageParam]", messages),  # the SDK types each role's message
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        read = _read_stream(stream, started, timeouts.total_s, max_tokens)
    except RequestFailed as failure:
        return Probe.failed(failure)
    except openai.APIStatusError as exc:
        headers = exc.response.headers
        status = classify_status(exc.status_code, exc.response.content, headers.get("retry-after"))
        return Probe.failed(proxy_refusal(status, proxy.sdk_proxy is not None, headers.get))
    except openai.APITimeoutError:
        return Probe.failed(RequestFailed(ErrorClass.TIMEOUT, f"no data within {read_s:g} s (openai SDK)"))
    except openai.APIConnectionError as exc:
        return Probe.failed(_connection_failure(exc.__cause__ or exc, proxy))
    except httpx2.TransportError as exc:  # the SDK reading an error's body that the peer reset (a proxy's 401)
        return Probe.failed(_connection_failure(exc, proxy))
    except openai.APIError as exc:  # an error event inside a 200 stream
        body = exc.body if exc.body is not None else exc.message
        return Probe.failed(classify_status(200, json.dumps({"error": body}).encode()))
    except (ValueError, TypeError, AttributeError, KeyError, openai.OpenAIError) as exc:
        return Probe.failed(
            RequestFailed(ErrorClass.BAD_RESPONSE, f"reading the stream failed: {type(exc).__name__}: {exc}")
        )
    finally:
        client.close()  # also ends a runaway reply's connection
    return _verdict(read, max_tokens)


@dataclass
class _StreamRead:
    """What the SDK's chunks said: first content time, content chunks, usage's count, the finish reason."""

    ttft_s: float | None = None
    tokens: int = 0
    usage_tokens: int | None = None
    finish: str | None = None


def _read_stream(stream: Iterable[Any], started: float, total_s: float, max_tokens: int) -> _StreamRead:
    """Read the SDK's chunks within the total timeout and the event budget of ``max_tokens``."""
    read = _StreamRead()
    events_left = max_events(max_tokens)
    for chunk in stream:
        if time.perf_counter() - started > total_s:
            raise RequestFailed(ErrorClass.TIMEOUT, f"stream exceeded the total timeout {total_s:g} s")
        events_left -= 1
        if events_left < 0:
            raise RequestFailed(
                ErrorClass.TRUNCATED,
                f"more than {max_events(max_tokens)} chunks for max_tokens "
                f"{max_tokens} and no [DONE]: the stream would not end",
            )
        usage = getattr(chunk, "usage", None)
        if usage is not None and isinstance(getattr(usage, "completion_tokens", None), int):
            read.usage_tokens = usage.completion_tokens
        choices = getattr(chunk, "choices", None)
        if not isinstance(choices, list):
            if usage is None:
                raise RequestFailed(ErrorClass.BAD_RESPONSE, "stream chunk without `choices` (reading choices failed)")
            continue
        for choice in choices:
            text = getattr(choice.delta, "content", None) or getattr(choice.delta, "reasoning_content", None)
            if text:
                read.ttft_s = read.ttft_s if read.ttft_s is not None else time.perf_counter() - started
                read.tokens += 1
            read.finish = choice.finish_reason or read.finish
    return read


def _verdict(read: _StreamRead, max_tokens: int) -> Probe:
    """A stream that ended: OK, cut short on length, or empty of content."""
    ttft, finish = read.ttft_s, read.finish
    completion = read.usage_tokens if read.usage_tokens is not None else read.tokens
    probe = Probe(ok=True, ttft_s=ttft, tokens=completion, finish_reason=finish)
    if finish == "length" and completion < max_tokens:
        return Probe(
            ok=False,
            error=ErrorClass.TRUNCATED.label,
            ttft_s=ttft,
            tokens=completion,
            finish_reason=finish,
            detail=f"finish_reason length after {completion} of max_tokens {max_tokens}",
        )
    if ttft is None:
        return Probe(
            ok=False,
            error=ErrorClass.BAD_RESPONSE.label,
            tokens=completion,
            finish_reason=finish,
            detail="the stream carried no content (reading choices found nothing)",
        )
    return probe


def _connection_failure(cause: BaseException, proxy: ProxyInfo) -> RequestFailed:
    """The class of an SDK connection error: a read budget, a broken reply, or the connection (or proxy)."""
    import httpx2

    if isinstance(cause, RequestFailed):  # a budget that ran out while the SDK was reading
        return cause
    if isinstance(cause, httpx2.RemoteProtocolError) and "disconnected" not in str(cause):
        return RequestFailed(
            ErrorClass.BAD_RESPONSE, f"the reply broke HTTP ({cause}): an endless header or not an HTTP server"
        )
    kind = ErrorClass.PROXY if proxy.sdk_proxy else ErrorClass.CONNECTION
    via = f" via proxy {proxy.sdk_proxy}" if proxy.sdk_proxy else ""
    return RequestFailed(kind, f"{type(cause).__name__}: {cause}{via}")


def raw_probe(
    url: str,
    key: str | None,
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    timeouts: Timeouts,
    api: str = "chat",
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | None = None,
    access: Access | None = None,
) -> Probe:
    """The same request through the load path's own client (and ``api``), so `attnload run` is known to work too
    (with an agent profile's ``tools`` array and ``tool_choice`` when given)."""
    client = ApiClient(url, key, timeouts, api=api, key_header=access.key_header if access else None)
    try:
        record = client.send(
            request_body(
                api, model, messages, max_tokens=max_tokens, temperature=0, tools=tools, tool_choice=tool_choice
            ),
            model_key="check",
            profile="check",
            stage=0,
        )
    finally:
        client.close()
    if record.outcome == "ok":
        return Probe(ok=True, ttft_s=record.ttft_s, tokens=record.completion_tokens)
    failure = client.last_failure or RequestFailed(ErrorClass.from_label(record.error or "bad_response"), "")
    return Probe.failed(failure)


@dataclass(frozen=True)
class Access:
    """How a model's endpoint wants its requests besides the key: the key's header (model key
    ``auth_header``, e.g. ``api-key``) and the URL's query string (``?api-version=...``), kept."""

    key_header: str | None = None
    query: str = ""
    """``"?a=b"`` or ""."""


def sdk_client(
    base_url: str,
    key: str | None,
    timeout: float | httpx2.Timeout,
    hook: Callable[[Any], None],
    access: Access | None = None,
) -> openai.OpenAI:
    """The openai SDK without retries, each response body behind ``hook``'s bounds (check_budget.py)."""
    import openai

    access = access or Access()
    headers: dict[str, Any] = {}
    if access.key_header:  # the key bare in its own header, and no Authorization beside it
        headers = {access.key_header: key or "", "Authorization": openai.Omit()}
    return openai.OpenAI(
        base_url=base_url,
        api_key=key or "no-key",
        max_retries=0,
        timeout=timeout,
        default_headers=headers or None,
        default_query=dict(parse_qsl(access.query.removeprefix("?"))) or None,
        http_client=openai.DefaultHttpxClient(timeout=timeout, event_hooks={"response": [hook]}),
    )
