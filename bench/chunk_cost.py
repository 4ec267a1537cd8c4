"""CPU per chunk of each in-process step of the client's hot loop, pure Python vs compiled.

No sockets and no hub: one recorded stream (128 plain deltas as the reference server frames
them, HTTP/1.1 chunked, one chunk per read) goes through the steps the stream loop runs per
read, each timed on its own with ``time.process_time`` (CPU, so a busy machine's waits do not
count), best of ``--repeat``: the HTTP framing (pure Python: llhttp's ``Response.feed`` with the
splitter detached; compiled: the read loop's own chunk framing, ``StreamBase.feed_body``), the SSE
split, the content check and stamping (``consume``), the record's gap pairs, and the two ITL
histogram updates ``Recorder.add`` makes per request. What it leaves out (the hub switch and
the ``recv`` syscall) is measured in the profiles of docs/performance.md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable

from attnload import native
from attnload.client import chat
from attnload.client.transport import Response
from attnload.measure.histogram import LogHistogram
from attnload.measure.recorder import split_gaps

WORDS = ["the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog", ",", " and"]
HEAD = (
    b'{"id":"chatcmpl-ref","object":"chat.completion.chunk","created":1,"model":"ref-model",'
    b'"choices":[{"index":0,"delta":{"content":"'
)
TAIL = b'"},"finish_reason":null}]}'


def events(tokens: int) -> list[bytes]:
    """The SSE events of one answer: role chunk, ``tokens`` plain deltas, finish, usage, [DONE]."""
    out = [
        b'data: {"id":"chatcmpl-ref","choices":[{"index":0,"delta":{"role":"assistant","content":""},'
        b'"finish_reason":null}]}\n\n'
    ]
    out += [b"data: " + HEAD + WORDS[i % len(WORDS)].encode() + TAIL + b"\n\n" for i in range(tokens)]
    out.append(b'data: {"id":"chatcmpl-ref","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n')
    out.append(
        b'data: {"id":"chatcmpl-ref","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":%d}}\n\n' % tokens
    )
    out.append(b"data: [DONE]\n\n")
    return out


def chunked(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


JITTER = [0.01 * (1 + 0.3 * math.sin(i * 2.4)) for i in range(97)]
"""Gaps of 10 ms ± 30 %: real gaps fall in different 2 % histogram buckets, as on the wire."""
HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def best(repeat: int, step: Callable[[], None]) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        step()
        times.append(time.process_time() - started)
    return min(times)


def measure(compiled: bool, tokens: int, answers: int, repeat: int) -> dict[str, float]:
    native.use(compiled)
    stream = events(tokens)
    reads = [chunked(e) for e in stream]

    def http_only() -> None:
        for _ in range(answers):
            response = Response(None)  # llhttp alone: the body goes to the capped buffer
            response.feed(HEADERS)
            for data in reads:
                response.feed(data)

    def framed_in_c() -> None:  # the compiled read loop's chunk framing, which feeds the splitter too
        for _ in range(answers):
            state = chat.new_stream(True, tokens)
            state.start_body(b"")
            for data in reads:
                state.feed_body(data)
                state.sse.events = []

    def split_only() -> None:
        for _ in range(answers):
            splitter = chat.new_stream(True, tokens).sse
            for data in stream:
                splitter.feed(data)
                splitter.events = []

    def split_and_consume() -> None:
        for _ in range(answers):
            state = chat.new_stream(True, tokens)
            feed, at = state.sse.feed, 0.0
            for i, data in enumerate(stream):
                feed(data)
                at += JITTER[i % len(JITTER)]
                state.consume(at, 0.0)

    state = chat.new_stream(True, tokens)
    at = 0.0
    for i, data in enumerate(stream):
        state.sse.feed(data)
        at += JITTER[i % len(JITTER)]
        state.consume(at, 0.0)
    gaps, chunk_tokens = list(state.gaps), list(state.chunk_tokens)
    samples = split_gaps(gaps, chunk_tokens, tokens)

    def pairs() -> None:
        for _ in range(answers):
            split_gaps(gaps, chunk_tokens, tokens)

    def histogram() -> None:
        hist = LogHistogram()
        for _ in range(answers * 2):  # Recorder.add: the series and the worker delta
            hist.record_pairs(samples)

    per = answers * tokens / 1e6  # µs per chunk
    split = best(repeat, split_only)
    both = best(repeat, split_and_consume)
    if compiled:  # the C framing calls the splitter itself: its split is in the framing row
        framing, split_row = best(repeat, framed_in_c), 0.0
    else:
        framing, split_row = best(repeat, http_only), split
    out = {
        "http framing": framing / per,
        "sse split": split_row / per,
        "content check + stamp": (both - split) / per,
        "gap pairs": best(repeat, pairs) / per,
        "ITL histogram x2": best(repeat, histogram) / per,
    }
    native.reset()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--answers", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rows = {"python": measure(False, args.tokens, args.answers, args.repeat)}
    if native.extension() is not None:
        rows["compiled"] = measure(True, args.tokens, args.answers, args.repeat)
    print(f"µs CPU per chunk ({args.tokens} plain deltas per answer, one chunk per read; best of {args.repeat})")
    print(f"{'step':<24}" + "".join(f"{k:>10}" for k in rows) + ("     ratio" if len(rows) == 2 else ""))
    for step in rows["python"]:
        values = [rows[k][step] for k in rows]
        ratio = f"{values[1] / values[0]:>9.2f}x" if len(values) == 2 and values[0] else ""
        print(f"{step:<24}" + "".join(f"{v:>10.2f}" for v in values) + " " + ratio)
    totals = [sum(rows[k].values()) for k in rows]
    print(
        f"{'total':<24}"
        + "".join(f"{v:>10.2f}" for v in totals)
        + (f" {totals[1] / totals[0]:>9.2f}x" if len(totals) == 2 else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
