"""Which workers a master lets in: only those running its config and its attnload version.

A worker started with another config (another model id, other ``max_tokens``), or an older image,
connects to a master like any other; Locust checks only its own version, gives it users and merges
its stats, so its requests land in the master's models with no warning. Here a joining worker is
held until it says who it is (``attnload_hello``: its config's sha256 and attnload's version, sent
from its ``init``); a match is admitted as Locust would admit it, a mismatch is refused with one
warning line naming the worker and both hashes, told to quit, and nothing it sends is merged.

Locust has no hook before it admits a worker (``MasterRunner.handle_message``'s ``client_ready``
gives it users at once while a test runs), so the master's own runner instance routes its messages
through :meth:`Admission.handle` first. The worker's ``client_ready`` waits for an ``ack`` before
its ``init`` runs, so the ack (with the index Locust would give) is sent at once and only the
admission waits for the hello.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import gevent

from attnload import __version__
from attnload.results.fleet import RefusedWorker

log = logging.getLogger(__name__)

HELLO_MESSAGE = "attnload_hello"
"""worker -> master, once at init: ``{"config_sha256": ..., "version": ...}``."""
HELLO_WAIT_S = 60.0
"""How long a joining worker may take to say hello (its init loads the config, datasets, tokenizers)."""


def hello(config_sha256: str) -> dict[str, str]:
    """What a worker says of itself (its pid names it on the console beside Locust's id)."""
    return {"config_sha256": config_sha256, "version": __version__, "pid": str(os.getpid())}


class Admission:
    """The master's gate: holds each new worker's ``client_ready`` until its hello matches."""

    def __init__(
        self,
        handle: Callable[[str, Any], None],
        send: Callable[..., None],
        worker_index: Callable[[str], int],
        config_sha256: str,
        accept_foreign: bool = False,
        on_refused: Callable[[RefusedWorker], None] | None = None,
        on_hello: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.locust_handle = handle
        self.send = send
        self.worker_index = worker_index
        self.mine = hello(config_sha256)
        self.accept_foreign = accept_foreign
        self.on_refused = on_refused
        self.on_hello = on_hello
        self.held: dict[str, tuple[str, Any, float]] = {}
        """node id -> (client id, its client_ready, when it arrived)."""
        self.admitted: set[str] = set()
        self.pids: dict[str, int] = {}
        self.refused: set[str] = set()

    def handle(self, client_id: str, msg: Any) -> None:
        """Every message the master receives passes here first."""
        node = msg.node_id
        if node in self.refused:
            return  # never merged: not its stats, not its final counts, not its heartbeats
        if msg.type == HELLO_MESSAGE:
            self._hello(node, msg.data if isinstance(msg.data, dict) else {})
            return
        if node not in self.admitted:
            if msg.type == "client_ready":
                self.held[node] = (client_id, msg, time.monotonic())
                self.send("ack", client_id=node, data={"index": self.worker_index(node)})
            return  # heartbeats and (empty) stats before admission are not Locust's business yet
        self.locust_handle(client_id, msg)

    def _hello(self, node: str, data: dict[str, Any]) -> None:
        if self.on_hello is not None:
            self.on_hello(node, data)
        if str(data.get("pid") or "").isdigit():
            self.pids[node] = int(data["pid"])
        theirs = {"config_sha256": str(data.get("config_sha256") or ""), "version": str(data.get("version") or "")}
        if theirs == {k: self.mine[k] for k in theirs}:
            self._admit(node)
        else:
            self._refuse(node, theirs.get("config_sha256") or None, theirs.get("version") or None)

    def _admit(self, node: str) -> None:
        self.admitted.add(node)
        held = self.held.pop(node, None)
        if held is not None:
            self.locust_handle(held[0], held[1])

    def _refuse(self, node: str, config_sha256: str | None, version: str | None) -> None:
        record = RefusedWorker(
            worker=node,
            pid=self.pids.get(node),
            config_sha256=config_sha256,
            version=version,
            admitted=self.accept_foreign,
        )
        what = (
            f"config sha256 {_short(config_sha256)} (attnload {version or '?'}) "
            f"vs the master's {_short(self.mine['config_sha256'])} (attnload {self.mine['version']})"
        )
        if self.on_refused is not None:
            self.on_refused(record)
        if self.accept_foreign:
            log.warning("worker %s differs from the master, admitted (--accept-foreign-workers): %s", node, what)
            self._admit(node)
            return
        label = f"{node} (pid {self.pids[node]})" if node in self.pids else node
        log.warning(
            "worker %s refused: %s; its reports are not merged (start it with the master's config, or pass "
            "--accept-foreign-workers)",
            label,
            what,
        )
        self.refused.add(node)
        self.held.pop(node, None)
        self.send("quit", client_id=node)

    def expire(self) -> None:
        """Refuse workers that never said hello (not attnload workers, or older ones)."""
        now = time.monotonic()
        for node, (_, _, since) in list(self.held.items()):
            if now - since > HELLO_WAIT_S:
                self._refuse(node, None, None)


def _short(sha: str | None) -> str:
    return sha or "none"


def install(
    runner: Any,
    config_sha256: str,
    accept_foreign: bool,
    on_refused: Callable[[RefusedWorker], None],
    on_hello: Callable[[str, dict[str, Any]], None] | None = None,
) -> None:
    """Route a master runner's messages through an :class:`Admission` (see the module docstring)."""
    gate = Admission(
        runner.handle_message,
        runner.send_message,
        runner.get_worker_index,
        config_sha256,
        accept_foreign=accept_foreign,
        on_refused=on_refused,
        on_hello=on_hello,
    )
    runner.handle_message = gate.handle

    def expire_loop() -> None:
        while True:
            gevent.sleep(1.0)
            gate.expire()

    gevent.spawn(expire_loop)


def say_hello(runner: Any, config_sha256: str) -> None:
    """Worker: tell the master which config and version this worker runs."""
    runner.send_message(HELLO_MESSAGE, hello(config_sha256))
