"""Health probe for the one image that plays three roles (``python3 -m attnload.cluster.healthcheck``).

The image cannot know its role (master, worker, simulator), so it probes the URL
given as argument or in ``ATTNLOAD_HEALTH_URL`` and passes when neither is set.
``http://`` URLs must answer 2xx/3xx; ``tcp://host:port`` must accept a connection,
which is how a Locust worker (it serves no port) shows it can reach its master.
Standard library only: the image ships no curl.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT_S = 4.0


def probe(url: str) -> bool:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "tcp":
        try:
            with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 0), timeout=TIMEOUT_S):
                return True
        except OSError:
            return False
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:
            return 200 <= reply.status < 400
    except (urllib.error.URLError, OSError):
        return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    url = args[0] if args else os.environ.get("ATTNLOAD_HEALTH_URL")
    return 0 if not url or probe(url) else 1


if __name__ == "__main__":
    sys.exit(main())
