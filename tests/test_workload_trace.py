"""Trace replay: Mooncake and Azure parsing, replay speed, hash-id prefix sharing, line-numbered errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from attnload.errors import UsageError
from attnload.measure.tokens import prompt_tokens
from attnload.workload.trace import (
    TracePrompts,
    TraceRequest,
    arrival_rate_per_s,
    load_trace,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "traces"
SALT = "[0123456789abcdef] "


def mooncake(tmp_path: Path, rows: list[dict[str, Any]], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def row(ts: float, n_in: int = 600, n_out: int = 20, ids: list[int] | None = None) -> dict[str, Any]:
    return {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids or [1, 2]}


def test_mooncake_offsets_sorted_relative_to_first_arrival(tmp_path: Path) -> None:
    path = mooncake(tmp_path, [row(5000, 700, 30, [7, 8]), row(1000), row(3500.5, n_out=9)])
    trace = load_trace(path)
    assert trace.format == "mooncake"
    assert [(r.offset_s, r.line) for r in trace.requests] == [(0.0, 2), (2.5005, 3), (4.0, 1)]
    assert trace.requests[2] == TraceRequest(4.0, 700, 30, (7, 8), 1)
    assert trace.duration_s == 4.0 and trace.arrival_rate_per_s == pytest.approx(0.5)


def test_replay_speed_scales_offsets(tmp_path: Path) -> None:
    path = mooncake(tmp_path, [row(0), row(1000), row(4000), row(10000)])
    normal, fast, slow = (load_trace(path, speed) for speed in (1.0, 2.0, 0.5))
    assert [r.offset_s for r in normal.requests] == [0.0, 1.0, 4.0, 10.0]
    assert [r.offset_s for r in fast.requests] == [0.0, 0.5, 2.0, 5.0]
    assert [r.offset_s for r in slow.requests] == [0.0, 2.0, 8.0, 20.0]
    assert fast.arrival_rate_per_s == pytest.approx(2 * normal.arrival_rate_per_s)
    with pytest.raises(UsageError, match=r"--replay-speed 0.0: must be above 0"):
        load_trace(path, 0.0)


def test_azure_csv_with_seven_fraction_digits(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9000000,396,109\n"
        "2023-11-16 18:15:47.0000001,879,2\n"
    )
    trace = load_trace(path)
    assert trace.format == "azure"
    assert [(r.offset_s, r.input_tokens, r.output_tokens, r.line) for r in trace.requests] == [
        (0.0, 374, 44, 2),
        (0.31941, 879, 2, 4),
        (4.21941, 396, 109, 3),
    ]
    assert trace.requests[0].hash_ids == ()


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 5\n',
            2,
            "malformed JSON",
        ),
        (
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n\n{"timestamp": -1, "input_length": 5, '
            '"output_length": 1}\n',
            3,
            "timestamp must be milliseconds",
        ),
        ('{"timestamp": 0, "input_length": 0, "output_length": 1}\n', 1, "input_length must be a positive integer"),
        ('{"timestamp": 0, "input_length": 5}\n', 1, "output_length must be a positive integer"),
        ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}\n', 1, "hash_ids must be a list"),
    ],
)
def test_mooncake_errors_name_the_line(tmp_path: Path, text: str, line: int, needle: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        load_trace(path)
    assert str(info.value).startswith(f"trace {path} line {line}: ") and needle in str(info.value)


def test_azure_and_file_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\nyesterday,10,2\n")
    with pytest.raises(UsageError, match=rf"^trace {bad} line 3: TIMESTAMP 'yesterday' is not a date"):
        load_trace(bad)
    count = tmp_path / "count.csv"
    count.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,ten,2\n")
    with pytest.raises(UsageError, match=r"line 2: ContextTokens must be a positive integer"):
        load_trace(count)
    header = tmp_path / "header.csv"
    header.write_text("time,input,output\n1,2,3\n")
    with pytest.raises(UsageError, match=r"line 1: the header lacks TIMESTAMP, ContextTokens, GeneratedTokens"):
        load_trace(header)
    with pytest.raises(UsageError, match="no such file"):
        load_trace(tmp_path / "missing.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(UsageError, match="the file is empty"):
        load_trace(empty)
    only_header = tmp_path / "only.csv"
    only_header.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(UsageError, match="no requests in it"):
        load_trace(only_header)


def test_equal_hash_ids_give_equal_prefix_text_and_exact_lengths() -> None:
    prompts = TracePrompts(SALT)
    a = TraceRequest(0.0, 1300, 10, (1, 2, 3))
    b = TraceRequest(0.1, 1500, 10, (1, 2, 9))
    c = TraceRequest(0.2, 700, 10, (5, 2))
    text_a, text_b, text_c = (prompts.content(r, i) for i, r in enumerate((a, b, c)))
    for request, text in ((a, text_a), (b, text_b), (c, text_c)):
        assert text.startswith(SALT)
        assert prompt_tokens([{"role": "user", "content": text}]) == request.input_tokens
    shared = len(os.path.commonprefix([text_a, text_b]))
    assert len(SALT) + 2 * 512 * 4 <= shared < len(SALT) + 2 * 512 * 4 + 16  # two whole blocks, then they differ
    assert len(os.path.commonprefix([text_a, text_c])) < len(SALT) + 16  # different first block: only the salt
    # a shorter request with the same ids is a prefix of the longer one (the last block is cut, not changed)
    short = prompts.content(TraceRequest(0.0, 700, 10, (1, 2, 3)), 99)
    assert text_a.startswith(short)
    # another run (another salt) shares nothing at the start
    assert TracePrompts("[fedcba9876543210] ").content(a, 0)[:1] == "[" and not TracePrompts(
        "[fedcba9876543210] "
    ).content(a, 0).startswith(SALT)


def test_tail_past_the_hash_blocks_is_unique_per_request() -> None:
    prompts = TracePrompts(SALT)
    request = TraceRequest(0.0, 1200, 10, (4,))
    one, two = prompts.content(request, 1), prompts.content(request, 2)
    shared = len(os.path.commonprefix([one, two]))
    assert len(SALT) + 512 * 4 <= shared < len(SALT) + 512 * 4 + 16
    assert prompt_tokens(prompts.messages(request, 1)) == 1200
    no_ids = TraceRequest(0.0, 300, 10)
    assert prompt_tokens(prompts.messages(no_ids, 5)) == 300


def test_arrival_rate_helper() -> None:
    assert arrival_rate_per_s([]) == 0.0 and arrival_rate_per_s([3.0]) == 0.0 and arrival_rate_per_s([1, 1]) == 0.0
    assert arrival_rate_per_s([0.0, 0.5, 1.0, 2.0]) == 1.5


def test_shipped_traces() -> None:
    moon = load_trace(EXAMPLES / "mooncake_sample.jsonl")
    assert len(moon.requests) == 40 and 9.0 < moon.duration_s <= 10.0
    first_blocks = [r.hash_ids[0] for r in moon.requests]
    assert len(set(first_blocks)) < len(first_blocks)  # requests share prefixes
    assert all(len(r.hash_ids) == -(-r.input_tokens // 512) for r in moon.requests)
    assert [r.offset_s for r in load_trace(EXAMPLES / "mooncake_sample.jsonl", 2.0).requests] == [
        round(r.offset_s / 2, 6) for r in moon.requests
    ]
    azure = load_trace(EXAMPLES / "azure_sample.csv")
    assert len(azure.requests) == 40 and azure.format == "azure" and 9.0 < azure.duration_s <= 10.0
