"""The proxy of the load path: which one (HTTP(S)_PROXY/ALL_PROXY, NO_PROXY) and its credentials.

A company proxy usually wants a login, given the way every HTTP tool reads it: as the userinfo of
the proxy URL (``HTTPS_PROXY=http://user:pass@proxy:3128``). It becomes a ``Proxy-Authorization:
Basic`` header on the ``CONNECT`` of an https target and on every request of a plain-http one
(absolute-form, through the proxy). The password is registered as a secret, so no error detail,
log line or report can carry it; the header itself is never printed.
"""

from __future__ import annotations

import base64
import urllib.request
from collections.abc import Callable
from urllib.parse import SplitResult, unquote, urlsplit

from attnload.errors import ErrorClass, RequestFailed, register_secret

LOOPBACK = ("127.", "localhost", "::1", "[::1]")
DEFAULT_PROXY_PORT = 8080


def proxy_url(scheme: str, host: str) -> SplitResult | None:
    """The proxy URL from HTTP(S)_PROXY/ALL_PROXY unless NO_PROXY (or loopback) bypasses ``host``."""
    # proxy_bypass is proxy_bypass_environment on Linux; on macOS and Windows it reads NO_PROXY the same way
    # whenever a proxy variable is set, and without one there is no proxy to bypass
    if host.startswith(LOOPBACK) or urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies_environment()
    url = proxies.get(scheme) or proxies.get("all")
    if not url:
        return None
    return urlsplit(url if "://" in url else "http://" + url)


def proxy_for(scheme: str, host: str) -> tuple[str, int] | None:
    """Where to connect instead of ``host`` (the proxy's host and port), or None to go direct."""
    parts = proxy_url(scheme, host)
    if parts is None:
        return None
    return parts.hostname or "", parts.port or DEFAULT_PROXY_PORT


def proxy_authorization(scheme: str, host: str) -> str:
    """The ``Proxy-Authorization`` header line (CRLF-terminated) for the proxy of ``host``, or ""."""
    parts = proxy_url(scheme, host)
    if parts is None or parts.username is None:
        return ""
    user, password = unquote(parts.username), unquote(parts.password or "")
    register_secret(password)
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    register_secret(token)
    return f"Proxy-Authorization: Basic {token}\r\n"


def proxy_refusal(failure: RequestFailed, via_proxy: bool, header: Callable[[str], str | None]) -> RequestFailed:
    """``failure`` as ``proxy_auth`` when the proxy, not the server, refused the login.

    A 407 is always the proxy's (classify.py). Some proxies answer wrong credentials with a 401 of
    their own instead (tinyproxy 1.11: ``401 Unauthorized``, ``WWW-Authenticate: Basic realm="Tinyproxy"``),
    which would read as the API key's ``auth``: a 401 through a proxy whose challenge names a proxy is
    the proxy's. ``header`` reads the response's headers.
    """
    if not via_proxy or failure.kind is not ErrorClass.AUTH:
        return failure
    challenge = f"{header('proxy-authenticate') or ''} {header('www-authenticate') or ''}".lower()
    if "proxy" not in challenge:
        return failure
    return RequestFailed(ErrorClass.PROXY_AUTH, f"{failure.detail} (the proxy's challenge: {challenge.strip()[:80]})")
