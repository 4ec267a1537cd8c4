"""Reachability: refuse to start against an endpoint that does not accept connections."""

from __future__ import annotations

import socket

from attnload.config.model import TestConfig
from attnload.errors import UsageError


def check_reachable(config: TestConfig) -> None:
    """Refuse to start against an endpoint that does not accept connections."""
    from attnload.client.transport import Endpoint

    seen: set[tuple[str, int]] = set()
    for target in config.models:
        endpoint = Endpoint.from_url(target.url)
        address = endpoint.proxy or (endpoint.host, endpoint.port)
        if address in seen:
            continue
        seen.add(address)
        try:
            socket.create_connection(address, timeout=5.0).close()
        except OSError as exc:
            what = "proxy" if endpoint.proxy else "endpoint"
            raise UsageError(
                f"cannot reach the {what} {address[0]}:{address[1]} for model {target.key} "
                f"({exc.strerror or exc}): start the server or fix base_url "
                f"(`attnload check -c FILE` diagnoses it)"
            ) from None
