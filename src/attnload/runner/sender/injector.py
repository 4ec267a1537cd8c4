"""``--shape interference:L``: the one extra sender per model that injects long prompts among its decoders.

Worker 0 (or the single process) runs it, so there is one injector per model in the whole run: every
``INJECT_EVERY_S`` it sends a unique prompt of L tokens asking for one token, and marks the window from
sending to the first token in ``state.interference``, against which that process's decode gaps are
classified (``measure/interference.py``). Its requests are kept out of the model's own latencies.
"""

from __future__ import annotations

import itertools
import logging
import time

import gevent
from gevent import GreenletExit

from attnload.apis import request_body
from attnload.client.chat import Cancelled
from attnload.config.model import ModelTarget
from attnload.measure.interference import INJECTOR_PROFILE
from attnload.runner.sender.sender import Sender
from attnload.runner.sender.users import chat_client
from attnload.workload.prompts import filler_text
from attnload.workload.shapes import INJECT_EVERY_S

log = logging.getLogger(__name__)
LEAD_S = 2.0
"""The first injection waits this long into the stage: the decode users are streaming by then."""
BYTES_PER_TOKEN = 4
_SEEDS = itertools.count(1)


class Injector:
    """One greenlet per model, from the stage's start until the test stops."""

    def __init__(self, sender: Sender, prefill_tokens: int) -> None:
        self.sender = sender
        self.prefill_tokens = prefill_tokens
        self._greenlets: list[gevent.Greenlet] = []

    def start(self, started_perf: float) -> None:
        if self._greenlets:
            return
        for target in self.sender.state.config.models:
            self._greenlets.append(gevent.spawn(self._inject, target, started_perf + LEAD_S))

    def stop(self) -> None:
        greenlets, self._greenlets = self._greenlets, []
        gevent.killall(greenlets, block=False)

    def _inject(self, target: ModelTarget, first_at: float) -> None:
        sender = self.sender
        state = sender.state
        client = chat_client(sender, target)
        due = first_at
        try:
            while True:
                # built before it is due: a 64 KB prompt takes the process milliseconds it owes its decoders
                body = request_body(
                    target.api,
                    target.id,
                    [{"role": "user", "content": filler_text(self.prefill_tokens * BYTES_PER_TOKEN, next(_SEEDS))}],
                    max_tokens=1,
                    temperature=state.config.request.temperature,
                    stream=True,
                    ignore_eos=True,
                )
                gevent.sleep(max(0.0, due - time.perf_counter()))
                sent = time.perf_counter()
                window = state.interference.open_window(target.key, sent)
                try:
                    record = client.send(
                        body, model_key=target.key, profile=INJECTOR_PROFILE, stage=state.stage_for(sent)
                    )
                except Cancelled as cancelled:
                    state.interference.close_window(target.key, window, cancelled.record, self.prefill_tokens)
                    return
                state.interference.close_window(target.key, window, record, self.prefill_tokens)
                if record.outcome == "failed":
                    log.warning("interference: an injected prompt to %s failed (%s)", target.key, record.error)
                due = max(due + INJECT_EVERY_S, time.perf_counter() + INJECT_EVERY_S / 2)
        except GreenletExit:
            pass
        finally:
            client.close()
