"""Endpoint resolution: a gateway root, a ``.../v1`` base or a full chat-completions URL."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from attnload.apis import api_of

CHAT_PATH = "/v1/chat/completions"


def resolve_chat_url(base_url: str) -> tuple[str, str, str]:
    """``(root, chat_url, note)``: accept a gateway root (``.../api``), a ``.../v1`` base or a full URL.

    The seed's gateway root is ``https://host/api`` and clients append
    ``/v1/chat/completions``; a base that already ends in ``/v1`` must not become
    ``/v1/v1``.
    """
    url, query = split_query(check_url(base_url))
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        root = url[: -len("/chat/completions")]
        root = root[:-3] if root.endswith("/v1") else root
        return root, url + query, "base_url is a full chat-completions URL; used as given"
    if url.endswith("/v1"):
        root = url[:-3]
        chat = root + CHAT_PATH + query
        return root, chat, f"base_url ends in /v1; used {chat} (not /v1/v1)"
    return url, url + CHAT_PATH + query, f"appended {CHAT_PATH} to base_url"


def check_api(value: str) -> str:
    """The model key ``api`` itself if it names an API of ``attnload.apis``; else a one-line ``ValueError``."""
    return api_of(value).name


def api_url(chat_url: str, api: str, model_id: str) -> str:
    """The endpoint of the API named ``api`` beside a resolved chat-completions URL (``.../v1/chat/completions``).

    An API under ``/v1`` keeps the base as resolved (a full chat URL's prefix included); one under
    another version (``/v1beta``) goes from the root, so a base ending in that version does
    not double it. The base's query string (``?api-version=...``) stays, after the API's own.
    """
    chat_url, query = split_query(chat_url)
    path = api_of(api).path(model_id)
    base = chat_url.removesuffix("/chat/completions")
    if path.startswith("/v1/"):
        return with_query(base + path[3:], query)
    version = path[: path.index("/", 1)]
    return with_query(base.removesuffix("/v1").removesuffix(version) + path, query)


def sdk_base_url(url: str, root: str, api: str, model_id: str) -> str:
    """The ``.../v1`` base an OpenAI client would be given for a model whose requests go to ``url``
    (its query string apart: the client takes that as its default query)."""
    path = api_of(api).path(model_id)
    if path.startswith("/v1/"):
        return split_query(url)[0].removesuffix(path[3:])
    at = url.rfind(path[: path.index("/", 1)] + "/")  # another version (``/v1beta``): the root before it
    return (url[:at] if at >= 0 else root) + "/v1"


_UNSAFE = re.compile(r"[\x00-\x20\x7f]")
_USERINFO = re.compile(r"(?<=://)[^/?#]*@")


def check_url(url: str, what: str = "base_url") -> str:
    """``url`` itself if it is an http(s) URL a client can use as given; else a one-line ``ValueError``.

    Parsed, not pattern-matched: a port out of 1-65535 or an unclosed ``[::1`` must fail
    here, not as a traceback in a worker. Whitespace and control characters are refused
    (a CR/LF would split the request line). Credentials in the URL are refused rather
    than redacted: the URL is written into results, HTML and logs, and one missed path
    would publish the password; the message never echoes it.
    """
    shown = _USERINFO.sub("***@", url)
    if _UNSAFE.search(url):
        raise ValueError(f"{what} {shown!r} contains whitespace or a control character (CR/LF/tab): remove it")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(
            f"{what} {shown!r} is not a valid URL ({exc}): write it as http(s)://host[:port]/path "
            "with a port from 1 to 65535"
        ) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} {shown!r} must start with http:// or https:// and name a host")
    if "@" in parts.netloc:
        raise ValueError(
            f"{what} {shown!r} carries user:password@ credentials, which are refused (they would be "
            "written into results and logs): remove them and put the key in the env var named by "
            "api_key_env"
        )
    if port == 0:
        raise ValueError(f"{what} {shown!r}: port 0 is not a port; use 1-65535")
    return url


def metrics_url(value: str | None) -> str | None:
    """A model's ``metrics_url``: an http(s) URL with a host, taken as given (its path is the
    server's metrics path, e.g. ``http://host:8001/metrics``); None keeps the default."""
    if value is None:
        return None
    return check_url(value, "metrics_url")


# ---------------------------------------------------------------- query strings and the key's header


def with_query(url: str, query: str) -> str:
    """``url`` with ``query`` (``"?a=b"`` or ""), after the URL's own query if it has one (``?alt=sse``)."""
    if not query:
        return url
    return url + ("&" + query[1:] if "?" in url else query)


def split_query(url: str) -> tuple[str, str]:
    """``(url without its query, "?query" or "")``: paths are resolved on the first, the query is kept
    and goes on every request (Azure OpenAI's ``?api-version=2024-10-21``)."""
    head, mark, query = url.partition("?")
    return head, mark + query


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""An HTTP field name (RFC 9110 §5.1: a token)."""


def check_header_name(value: str) -> str:
    """The model key ``auth_header`` (e.g. ``api-key``) if it is an HTTP field name; else a one-line ``ValueError``."""
    if not _TOKEN.fullmatch(value):
        raise ValueError(
            f"auth_header {value!r} is not an HTTP header name: use letters, digits and '-' (e.g. api-key)"
        )
    return value
