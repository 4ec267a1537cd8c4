"""Transport: endpoints (their proxy: proxy.py), timeouts, the llhttp response parser, the timer-free reader."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import gevent
import gevent.socket
import gevent.ssl
from geventhttpclient.response import HTTPResponse

from attnload.client.budget import MAX_BODY_BYTES
from attnload.client.classify import classify_status
from attnload.client.proxy import proxy_authorization, proxy_for
from attnload.client.sse import EventSplitter
from attnload.errors import ErrorClass, RequestFailed

RECV_BYTES = 65536
ERROR_BODY_LIMIT = 64 * 1024


class Response(HTTPResponse):
    """llhttp parser whose body bytes go straight to a splitter (``EventSplitter``) or a capped buffer.

    A body other than a 200 stream is read up to ``MAX_BODY_BYTES`` (budget.py): past that
    a 200 is ``bad_response`` and an error status is classified from what was read.
    """

    def __init__(self, sse: EventSplitter | None) -> None:
        super().__init__(method="POST")
        self.sse = sse
        self.body = bytearray()
        self.body_bytes = 0
        self._sink: Any = None
        """``sse.feed`` once a 200's body has started: later body chunks skip the status check."""
        self.ended = False
        """The final (not 1xx) message ended; llhttp's ``message_complete`` goes back to False when bytes
        of a next one follow, and its error on bytes after the end must not fail a complete answer."""

    def _on_message_complete(self) -> None:
        super()._on_message_complete()
        if self.get_code() >= 200:
            self.ended = True

    def _on_body(self, buf: bytearray) -> None:
        sink = self._sink
        if sink is not None:
            sink(buf)  # the splitter copies what it keeps (buf is reused by llhttp)
            return
        code = self.get_code()
        if self.sse is not None and code == 200:
            sink = self._sink = self.sse.feed
            sink(buf)
            return
        self.body_bytes += len(buf)
        if self.body_bytes > MAX_BODY_BYTES:
            if code == 200:
                raise RequestFailed(ErrorClass.BAD_RESPONSE, f"the response body exceeded {MAX_BODY_BYTES} bytes")
            raise classify_status(code, bytes(self.body), None)
        if code == 200 or len(self.body) < ERROR_BODY_LIMIT:
            self.body += buf


class SocketReader:
    """Reads a plain-TCP gevent socket with one lazily re-armed deadline timer, not one per read.

    Why: ``settimeout`` + ``recv`` builds a gevent ``Timeout`` (a libev timer started and
    stopped from Python) around every blocking read and tries ``recv`` before waiting, which
    on these VMs doubled the client's CPU per token (docs/performance.md). Here each read
    waits for readability on one reused io watcher, then makes one ``recv`` call; a single
    timer per connection fires at the earliest deadline it was armed for and either throws
    ``TimeoutError`` into a read that is past its deadline or re-arms for the read in progress.
    Deadlines are the same as with ``settimeout(wait_s)``; the timer just moves less often.
    """

    __slots__ = ("sock", "raw", "io", "hub", "greenlet", "timer", "armed_until", "until", "waiting")

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.raw = sock._sock  # the non-blocking _socket.socket under gevent's wrapper
        self.hub = gevent.get_hub()
        self.io = self.hub.loop.io(sock.fileno(), 1)
        self.greenlet: Any = None
        self.timer: Any = None
        self.armed_until = 0.0
        self.until = 0.0
        self.waiting = False

    def recv(self, wait_s: float) -> bytes:
        until = self.until = time.perf_counter() + wait_s
        if self.timer is None or until < self.armed_until:
            self._arm(until)
        self.greenlet = gevent.getcurrent()
        self.waiting = True
        try:
            self.hub.wait(self.io)
        finally:
            self.waiting = False
        try:
            return self.raw.recv(RECV_BYTES)
        except BlockingIOError:
            return self.recv(until - time.perf_counter())  # a spurious wake-up: wait again

    def release(self) -> None:
        """Stop the timer: armed, it holds this reader (its callback) and this reader holds it, a cycle."""
        if self.timer is not None:
            self.timer.stop()
            self.timer = None
        self.io.close()

    def _arm(self, until: float) -> None:
        if self.timer is not None:
            self.timer.stop()
        self.timer = self.hub.loop.timer(max(until - time.perf_counter(), 0.0))
        self.timer.ref = False  # an idle connection's timer must not keep the hub alive
        self.armed_until = until
        self.timer.start(self._expired)

    def _expired(self) -> None:
        self.timer = None
        if not self.waiting:
            return  # no read in progress: the next read arms again
        if time.perf_counter() >= self.until:
            self.greenlet.throw(TimeoutError("read deadline passed"))
        else:
            self._arm(self.until)


def head_end(tail: bytes, data: bytes) -> int:
    """Where in ``data`` the response head ends (just past its blank line), or -1; ``tail`` is the
    last bytes read before ``data`` (up to 3), so a blank line cut between reads is found."""
    at = (tail + data).find(b"\r\n\r\n")
    return at if at < 0 else at + 4 - len(tail)


@dataclass(frozen=True)
class Endpoint:
    """Where one model's requests go, with proxy resolution done once."""

    host: str
    port: int
    path: str
    """The request target: the URL's path and its query string, kept (Azure's ``?api-version=``)."""
    tls: bool
    proxy: tuple[str, int] | None
    proxy_auth: str = field(default="", repr=False)
    """The ``Proxy-Authorization`` header line from the proxy URL's userinfo (client/proxy.py), or ""."""

    @classmethod
    def from_url(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        host = parts.hostname or ""
        port = parts.port or (443 if tls else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(
            host=host,
            port=port,
            path=path,
            tls=tls,
            proxy=proxy_for(parts.scheme, host),
            proxy_auth=proxy_authorization(parts.scheme, host),
        )

    @property
    def authority(self) -> str:
        """``host:port`` as a request line or CONNECT names it: an IPv6 literal in brackets (RFC 9110 §7.2)."""
        return f"{_bracketed(self.host)}:{self.port}"

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        return _bracketed(self.host) if self.port == default else self.authority


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class Timeouts:
    """Named apart on purpose: a bare ``timeout`` would bound each read, not the request."""

    connect_s: float = 10.0
    ttft_s: float | None = None
    idle_s: float = 60.0
    total_s: float = 600.0
