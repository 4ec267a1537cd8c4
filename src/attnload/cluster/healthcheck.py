"""Container HEALTHCHECK for the one image that plays three roles.

The image cannot know which role it runs (master, worker, simulator), so the check
probes ``ATTNLOAD_HEALTH_URL`` when the deployment sets it and passes otherwise; it
uses only the standard library because the image ships no curl.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    url = os.environ.get("ATTNLOAD_HEALTH_URL")
    if not url:
        return 0
    try:
        with urllib.request.urlopen(url, timeout=4) as reply:
            return 0 if 200 <= reply.status < 400 else 1
    except (urllib.error.URLError, OSError):
        return 1


if __name__ == "__main__":
    sys.exit(main())
