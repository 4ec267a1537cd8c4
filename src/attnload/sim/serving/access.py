"""What the simulator may demand of a request beyond its body: a header with a key and a query parameter.

Azure OpenAI addresses a deployment as ``.../chat/completions?api-version=2024-10-21`` and takes the
key bare in an ``api-key`` header; some gateways want their own header too. ``attnload sim
--require-query api-version=2024-10-21 --require-header api-key=KEY`` answers like Azure when either
is missing (400 for the query parameter, 401 for the key), so a clean run proves the client sent both
on every request.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware


@dataclass(frozen=True)
class Demands:
    """``(name, value)`` pairs every POST must carry: as headers, and as query parameters."""

    headers: tuple[tuple[str, str], ...] = ()
    query: tuple[tuple[str, str], ...] = ()


def parse_pairs(values: Sequence[str] | None, flag: str) -> tuple[tuple[str, str], ...]:
    """``NAME=VALUE`` flags as pairs; a value without ``=`` is a one-line ``ValueError`` naming ``flag``."""
    pairs = []
    for text in values or ():
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{flag} {text!r}: write NAME=VALUE (e.g. {flag} api-version=2024-10-21)")
        pairs.append((name.strip(), value))
    return tuple(pairs)


def demanding(demands: Demands) -> Middleware:
    """An aiohttp middleware refusing a POST that lacks a demanded query parameter (400) or header (401)."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "POST":
            for name, value in demands.query:
                if request.query.get(name) != value:
                    return _error(400, "MissingApiVersionParameter", f"the query parameter {name}={value} is required")
            for name, value in demands.headers:
                if request.headers.get(name) != value:
                    return _error(401, "401", f"Access denied: the {name} header is missing or wrong")
        return await handler(request)

    return check


def _error(status: int, code: str, message: str) -> web.Response:
    body = json.dumps({"error": {"code": code, "message": message}})
    return web.Response(status=status, text=body, content_type="application/json")
