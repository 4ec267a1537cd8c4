"""What one Locust process runs, composed the way Locust composes its runners.

One :class:`Runtime` lives on ``environment.attnload`` in every Locust process: the shared
:class:`~attnload.runner.state.RunState`, plus a sender where requests are sent (a worker, or a
single process) and a collector where the run is collected (the master, or a single process).
A single local process composes both; the lifecycle below tells each part what it must know.
"""

from __future__ import annotations

import time

from attnload.attention import FactsLookup, no_facts
from attnload.config.model import TestConfig
from attnload.plan.options import RunOptions
from attnload.plan.traffic import check_traffic
from attnload.runner.collector.channels import CHANNELS
from attnload.runner.collector.collector import Collector, LocalCollector, MasterCollector
from attnload.runner.collector.requestsfile import RequestsWriter
from attnload.runner.sender.requestlines import RequestLines
from attnload.runner.sender.sender import Sender
from attnload.runner.state import RunState


class Runtime:
    """The state, sender and collector of one Locust process."""

    def __init__(self, state: RunState, sender: Sender | None, collector: Collector | None) -> None:
        self.state = state
        self.sender = sender
        self.collector = collector
        self.requests_out: str | None = None
        """The ``--requests-out`` path in use (``/swarm`` may set it per test)."""
        self.use_requests_out(state.options.requests_out)

    @classmethod
    def local(cls, config: TestConfig, options: RunOptions, attention_facts: FactsLookup = no_facts) -> Runtime:
        """A single process: it sends and collects."""
        state = RunState(config, options, attention_facts)
        sender = Sender(state)
        return cls(state, sender, LocalCollector(state, sender, CHANNELS))

    @classmethod
    def worker(cls, config: TestConfig, options: RunOptions, attention_facts: FactsLookup = no_facts) -> Runtime:
        """A Locust worker: it sends, and ships what it recorded to the master."""
        state = RunState(config, options, attention_facts)
        return cls(state, Sender(state), None)

    @classmethod
    def master(cls, config: TestConfig, options: RunOptions, attention_facts: FactsLookup = no_facts) -> Runtime:
        """A Locust master: it directs the stages and collects what its workers send.

        It sends nothing, yet checks what its workers will open (keys, datasets, tokenizers), so a
        missing key or a bad file stops it at start as it stops them, and its logs redact the keys."""
        state = RunState(config, options, attention_facts)
        check_traffic(config, state.workload.profiles)
        for target in config.models:
            target.api_key()
        return cls(state, None, MasterCollector(state, CHANNELS))

    def begin_test(self) -> None:
        """A new test: fresh recorder, clock and stages (shape start, or test_start without a shape)."""
        self.state.begin()
        if self.sender is not None:
            self.sender.begin_test()
        if self.collector is not None:
            self.collector.begin_test()

    def test_started(self) -> None:
        """Locust's test_start; with a shape it fires after the first tick, which already began the test."""
        if not self.state.running:
            self.begin_test()
            if self.state.options.shape is None:
                self.enter_stage(0, users=None, rate=None)

    def enter_stage(
        self,
        index: int,
        users: int | None,
        rate: float | None,
        rates: dict[str, float] | None = None,
        workers: int | None = None,
        salt: str | None = None,
    ) -> None:
        """A new stage begins (master: from the shape; workers: from its message).

        ``rates`` (per model key) makes it an open-loop stage: a sending process starts
        its share of the schedule (``workers`` shares in all, this one ``worker_index``).
        """
        state = self.state
        if self.collector is not None:
            self.collector.close_stage()
        now = time.perf_counter()
        if salt:
            state.run_salt = salt
        rates = state.open_stage(index, users, rate, rates, now)
        if self.collector is not None:
            self.collector.enter_stage(users, rate, rates)
        if workers:
            state.worker_count = workers
        if self.sender is not None:
            self.sender.enter_stage(index, rates, now)

    def test_stopped(self) -> None:
        if not self.state.end():
            return
        if self.sender is not None:
            self.sender.stop()
        if self.collector is not None:
            self.collector.test_stopped()

    def use_requests_out(self, path: str | None) -> None:
        """The ``--requests-out`` a test asked for: reopen when it changed (a bad path raises UsageError)."""
        if path == self.requests_out:
            return
        if self.collector is not None:
            self.collector.close_requests()
        self.stop_requests_out()
        if self.sender is not None and path:
            self.sender.lines = RequestLines(self.state.config)
        if self.collector is not None and path:
            self.collector.requests = RequestsWriter(path)
        self.requests_out = path

    def stop_requests_out(self) -> None:
        """No ``--requests-out`` (none asked, or its file could not be opened)."""
        if self.sender is not None:
            self.sender.lines = None
        if self.collector is not None:
            self.collector.requests = None
        self.requests_out = None
