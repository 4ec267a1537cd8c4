"""Worker -> master feature channels: a report crosses Locust's wire and the master's results count
what the worker recorded; a new feature is one registered channel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from locust.rpc.protocol import Message

from attnload.config.load import load_config
from attnload.measure.recorder import RequestRecord, Series
from attnload.plan.options import RunOptions
from attnload.results.summarize import ResultsPart
from attnload.runner import messages, runtime
from attnload.runner.collector.channels import CHANNELS, ModelFields
from attnload.runner.collector.collector import Channel, Collector, MasterCollector
from attnload.runner.messages import REPORT_KEY, merge_report, worker_report
from attnload.runner.runtime import Runtime
from attnload.runner.sender.sender import Sender
from helpers import write_config


def _record(model_key: str, completion_tokens: int) -> RequestRecord:
    return RequestRecord(
        model_key=model_key,
        profile="chat",
        stage=-1,
        outcome="ok",
        error=None,
        ttft_s=0.25,
        itl_samples=((0.02, completion_tokens - 1),),
        e2e_s=0.31,
        prompt_tokens=100,
        completion_tokens=completion_tokens,
        cached_prompt_tokens=None,
        tokens_estimated=False,
        started_perf=None,
        http_status=200,
    )


def _fleet(tmp_path: Path) -> tuple[Sender, MasterCollector]:
    config = load_config(write_config(tmp_path, "http://127.0.0.1:9"))
    options = RunOptions(config.source)
    worker, master = Runtime.worker(config, options), Runtime.master(config, options)
    worker.begin_test()
    master.begin_test()
    assert worker.sender is not None and isinstance(master.collector, MasterCollector)
    return worker.sender, master.collector


def _ship(sender: Sender, collector: MasterCollector, worker: str, final: bool = False) -> dict[str, Any]:
    """One report through Locust's own msgpack encoding, merged by the master."""
    sent = Message("report_to_master", {REPORT_KEY: worker_report(sender, final)}, worker).serialize()
    report: dict[str, Any] = Message.unserialize(sent).data[REPORT_KEY]
    merge_report(collector, worker, report)
    return report


def test_the_master_counts_exactly_what_its_worker_recorded(tmp_path: Path) -> None:
    sender, collector = _fleet(tmp_path)
    for _ in range(7):
        sender.observe(_record("gqa_model", completion_tokens=20))
    sender.observe(_record("mla_model", completion_tokens=5))
    report = _ship(sender, collector, "w1")
    # every registered channel with something to say is on the wire, under its own key
    assert set(report) == {c.key for c in CHANNELS if c.key} - {"paired", "requests", "stall"}
    _ship(sender, collector, "w1", final=True)  # deltas restart from zero: nothing counted twice
    results = collector.results()
    gqa, mla = results.model("gqa_model"), results.model("mla_model")
    assert (gqa.requests.ok, gqa.completion_tokens, gqa.prompt_tokens) == (7, 140, 700)
    assert (mla.requests.ok, mla.completion_tokens) == (1, 5)
    assert gqa.ttft_s.p50 == pytest.approx(0.25, rel=0.02)
    assert results.client.workers == 1 and results.client.users_started == 0


class _Probe(Channel):
    """A new feature: each worker's count of final reports, named in every model's summary."""

    key = "probe"

    def __init__(self) -> None:
        self.finals: dict[str, int] = {}

    def take(self, sender: Sender, final: bool) -> Any:
        return {"final": int(final)}

    def merge(self, master: MasterCollector, worker: str, payload: Any) -> None:
        self.finals[worker] = self.finals.get(worker, 0) + int(payload["final"])

    def reset(self, collector: Collector) -> None:
        self.finals.clear()

    def part(self, collector: Collector) -> ResultsPart:
        note = ", ".join(f"{w}: {n}" for w, n in sorted(self.finals.items()))
        return ModelFields({m.key: {"reasoning_note": note} for m in collector.state.config.models})


def test_a_new_feature_is_one_registered_channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = _Probe()
    for module in (messages, runtime):  # the registry, as both sides of a run read it
        monkeypatch.setattr(module, "CHANNELS", (*CHANNELS, probe))
    sender, collector = _fleet(tmp_path)
    sender.observe(_record("gqa_model", completion_tokens=3))
    for worker in ("w1", "w2"):
        _ship(sender, collector, worker)
    _ship(sender, collector, "w2", final=True)
    results = collector.results()
    assert results.model("gqa_model").reasoning_note == "w1: 0, w2: 1"
    assert results.model("gqa_model").requests.ok == 1
    collector.begin_test()  # a new test resets it
    assert probe.finals == {}


def test_a_part_adds_nothing_unless_it_says_so() -> None:
    part = ResultsPart()
    assert part.fields("m", Series()) == {}
