"""Endpoint resolution: a gateway root, a ``.../v1`` base or a full chat-completions URL."""

from __future__ import annotations

import re

CHAT_PATH = "/v1/chat/completions"


def resolve_chat_url(base_url: str) -> tuple[str, str, str]:
    """``(root, chat_url, note)``: accept a gateway root (``.../api``), a ``.../v1`` base or a full URL.

    The seed's gateway root is ``https://host/api`` and clients append
    ``/v1/chat/completions``; a base that already ends in ``/v1`` must not become
    ``/v1/v1``.
    """
    url = base_url.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError(f"base_url {base_url!r} must start with http:// or https:// and name a host")
    if url.endswith("/chat/completions"):
        root = url[: -len("/chat/completions")]
        root = root[:-3] if root.endswith("/v1") else root
        return root, url, "base_url is a full chat-completions URL; used as given"
    if url.endswith("/v1"):
        root = url[:-3]
        return root, root + CHAT_PATH, f"base_url ends in /v1; used {root + CHAT_PATH} (not /v1/v1)"
    return url, url + CHAT_PATH, f"appended {CHAT_PATH} to base_url"


def metrics_url(value: str | None) -> str | None:
    """A model's ``metrics_url``: an http(s) URL with a host, taken as given (its path is the
    server's metrics path, e.g. ``http://host:8001/metrics``); None keeps the default."""
    if value is None:
        return None
    url = value.strip()
    if not re.match(r"^https?://[^/\s?#]+(/\S*)?$", url):
        raise ValueError(f"metrics_url {value!r} must be an http:// or https:// URL with a host, "
                         "e.g. http://10.0.0.5:8000/metrics")
    return url
