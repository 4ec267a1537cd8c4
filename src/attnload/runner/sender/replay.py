"""``--shape replay:PATH``: a trace's requests, each sent to every model at the trace's own offsets.

Why every model gets the whole trace: a replay is a paired comparison by construction,
so both attention types see the same arrivals, prompt lengths, prefix sharing and output
lengths. Worker *w* of *n* sends trace lines *w*, *w + n*, … (to every model), so the fleet
sends each line once per model. The prompt text comes from :class:`TracePrompts` with one
run-wide salt (the master hands it to the workers in the stage message), so lines with equal
``hash_ids`` share prefix text across workers and nothing is shared with other runs.
``max_tokens`` is the line's output length, sent with ``ignore_eos`` so the server emits exactly that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from attnload.runner.sender.openloop import PAIR_STREAM, OpenStage
from attnload.workload.prompts import PlannedRequest
from attnload.workload.shapes import REPLAY_LEAD_S, ReplaySpec
from attnload.workload.tokenizer import TextTokens
from attnload.workload.trace import Trace, TracePrompts, load_trace

REPLAY_PROFILE = "replay"
"""Profile name of replayed requests in the results."""


class ReplaySchedule:
    """This worker's share of the trace as ``(perf_counter time, stream, plan)`` for one stage start."""

    def __init__(
        self, spec: ReplaySpec, keys: list[str], paired: bool, salt: Callable[[], str], tokens: TextTokens | None = None
    ) -> None:
        self.trace: Trace = load_trace(spec.path, spec.speed)
        self.streams = [PAIR_STREAM] if paired else list(keys)
        self.salt = salt
        self.tokens = tokens

    def __call__(self, stage: OpenStage) -> Iterator[tuple[float, str, PlannedRequest]]:
        """In time order, built lazily: a line's prompt is built while waiting for it, never all up front
        (a real trace's prompts would not fit in memory, and building them first would delay the start)."""
        prompts = TracePrompts(self.salt(), self.tokens)
        count = max(stage.share_count, 1)
        for number, request in enumerate(self.trace.requests):
            if number % count != stage.share_index % count:
                continue
            plan = PlannedRequest(
                profile=REPLAY_PROFILE,
                messages=prompts.messages(request, unique_seed=number),
                max_tokens=request.output_tokens,
                ignore_eos=True,
            )
            for stream in self.streams:
                yield stage.started_perf + REPLAY_LEAD_S + request.offset_s, stream, plan

    @property
    def total_requests(self) -> int:
        """Requests the whole fleet sends: every line to every model."""
        return len(self.trace.requests)
