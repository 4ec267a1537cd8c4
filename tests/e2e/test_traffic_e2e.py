"""Real chat traffic end to end: conversations, dataset prompts and trace replay against a
server that records what it receives (``tests/fakes/recording_server.py``), and the simulator's prefix cache.

Every check is server side where it can be: the recording server logs each request body with the
wall time it arrived and the time its answer ended, so what the client claims is never the evidence.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from helpers import FAKES, ROOT, Processes, attnload, free_port, latest_results, start_sim, wait_http, write_config

SALT = re.compile(r"^\[[0-9a-f]{16}\] ")
MODELS = {"gqa_model": ("llama-3-70b", "GQA"), "mla_model": ("deepseek-v3", "MLA")}


def start_recorder(processes: Processes, tmp_path: Path, chunk_delay_ms: float = 1.0) -> tuple[str, Path]:
    port, log = free_port(), tmp_path / "received.jsonl"
    process = processes.start(
        [sys.executable, str(FAKES / "recording_server.py"), str(port), str(log), str(chunk_delay_ms)],
        name="recorder",
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", process)
    return url, log


def received(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


def run(processes: Processes, config: Path, results: Path, *args: str, timeout_s: float = 120) -> dict[str, Any]:
    process = processes.start(
        attnload("run", "-c", str(config), "--results", str(results), "--metrics-port", str(free_port()), *args),
        name="run",
    )
    assert process.wait(timeout=timeout_s) == 0, processes.log_of(process)[-3000:]
    return latest_results(results)


def conversations(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Requests grouped by conversation (its first user message, salt included), in arrival order."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in sorted(entries, key=lambda e: e["t_recv"]):
        messages = entry["body"]["messages"]
        first_user = next(m["content"] for m in messages if m["role"] == "user")
        grouped[entry["body"]["model"] + "|" + first_user].append(entry)
    return grouped


def test_conversations_resend_the_streamed_reply_and_think(processes: Processes, tmp_path: Path) -> None:
    """(a) request k = request k−1's messages + the reply exactly as streamed + one user message; 3 turns;
    think time 0.3 s measured at the server from the end of an answer to the next request."""
    url, log = start_recorder(processes, tmp_path)
    config = write_config(
        tmp_path,
        url,
        MODELS,
        workload={"chat": {"conversation": {"turns": 3, "think_time_s": 0.3, "user_tokens": 40}, "max_tokens": 16}},
    )
    data = run(
        processes, config, tmp_path / "r", "--users", "2", "--duration", "6s", "--workers", "2", "--spawn-rate", "10"
    )
    groups = conversations(received(log))
    complete = [g for g in groups.values() if len(g) == 3]
    assert len(complete) >= 4, {k: len(v) for k, v in groups.items()}
    gaps = []
    for turns in groups.values():
        assert len(turns) <= 3  # a conversation never runs past its turns
        assert SALT.match(turns[0]["body"]["messages"][0]["content"])
        for previous, current in zip(turns, turns[1:], strict=False):
            sent, before = current["body"]["messages"], previous["body"]["messages"]
            assert sent[: len(before)] == before
            assert sent[len(before)] == {"role": "assistant", "content": previous["reply"]}  # byte for byte
            assert len(sent) == len(before) + 2 and sent[-1]["role"] == "user"
            assert not SALT.match(sent[-1]["content"])
            gaps.append(current["t_recv"] - previous["t_end"])
    assert gaps and min(gaps) >= 0.3 - 0.02, sorted(gaps)[:5]  # never early (±20 ms)
    assert statistics.median(gaps) <= 0.3 + 0.05, statistics.median(gaps)  # loaded-machine margin above
    print(f"think-time gaps: min {min(gaps):.3f} s, median {statistics.median(gaps):.3f} s, max {max(gaps):.3f} s")
    for model in data["models"]:
        rows = {row["turn"]: row for row in model["turns"]}
        assert set(rows) == {1, 2, 3}
        assert rows[1]["prompt_tokens_mean"] < rows[2]["prompt_tokens_mean"] < rows[3]["prompt_tokens_mean"]
        assert rows[1]["ttft_s"]["count"] == rows[1]["requests"] - rows[1]["failed"]


@pytest.mark.parametrize("name", ["chat_sample.sharegpt.json", "chat_sample.jsonl"])
def test_dataset_prompts_come_from_the_file(processes: Processes, tmp_path: Path, name: str) -> None:
    """(b) every user message is a record's (salt aside), every record once before any repeats (seeded
    shuffle, two workers), and output_tokens "dataset" sends the record's reply length as max_tokens."""
    from attnload.workload.dataset import open_dataset

    path = ROOT / "examples" / "datasets" / name
    with open_dataset(path) as dataset:
        records = [dataset.record(i) for i in range(len(dataset))]
    first_turns = {r.user_turns[0]: r for r in records}
    url, log = start_recorder(processes, tmp_path, chunk_delay_ms=0)
    config = write_config(
        tmp_path,
        url,
        {"gqa_model": MODELS["gqa_model"]},
        seed=7,
        workload={"data": {"dataset": {"path": str(path), "output_tokens": "dataset", "turns": "first"}}},
    )
    run(processes, config, tmp_path / "r", "--users", "2", "--duration", "4s", "--workers", "2", "--spawn-rate", "10")
    entries = sorted(received(log), key=lambda e: e["t_recv"])
    assert len(entries) >= 2 * len(records)
    used = []
    for entry in entries:
        messages = entry["body"]["messages"]
        user = [m["content"] for m in messages if m["role"] == "user"]
        assert len(user) == 1
        text = SALT.sub("", user[0]) if messages[0]["role"] != "system" else user[0]
        assert text in first_turns, text[:80]
        record = first_turns[text]
        expected = record.max_tokens or (record.reply_tokens[0] if record.reply_tokens else None)
        if expected is not None:
            assert entry["body"]["max_tokens"] == expected
        used.append(text)
    # Each worker's requests arrive in its own order; the fleet's first len(records) distinct prompts
    # cover the file before any repeats: no record appears twice among the first n requests.
    n = len(records)
    assert len(set(used[:n])) >= n - 2  # the two workers' interleaving may swap a boundary pair
    assert set(used) == set(first_turns)


def _offsets_by_model(entries: list[dict[str, Any]]) -> dict[str, list[float]]:
    by_model: dict[str, list[float]] = defaultdict(list)
    for entry in entries:
        by_model[entry["body"]["model"]].append(entry["t_recv"])
    return {k: [t - min(v) for t in sorted(v)] for k, v in by_model.items()}


def test_mooncake_replay_keeps_the_trace_offsets(processes: Processes, tmp_path: Path) -> None:
    """(c) 40 lines over 10 s at speed 1: each model gets every line within 30 ms (p99) of the trace
    offset, max_tokens == output_length with ignore_eos, equal hash_ids share prefix text."""
    from attnload.workload.trace import load_trace

    trace_path = ROOT / "examples" / "traces" / "mooncake_sample.jsonl"
    trace = load_trace(trace_path)
    url, log = start_recorder(processes, tmp_path, chunk_delay_ms=0)
    config = write_config(tmp_path, url, MODELS, workload={"p": {"prompt_tokens": 100}})
    data = run(
        processes,
        config,
        tmp_path / "r",
        "--shape",
        f"replay:{trace_path}",
        "--workers",
        "2",
        "--stage-duration",
        "10s",
    )
    entries = received(log)
    expected = sorted(r.offset_s for r in trace.requests)
    for model_id, offsets in _offsets_by_model(entries).items():
        assert len(offsets) == len(trace.requests), model_id
        errors = sorted(abs(a - e) for a, e in zip(offsets, expected, strict=True))
        p99 = errors[min(len(errors) - 1, int(0.99 * len(errors)))]
        print(f"{model_id}: offset error p50 {errors[len(errors) // 2] * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
        assert p99 <= 0.030, errors[-5:]
    by_length: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        body = entry["body"]
        assert body["ignore_eos"] is True
        by_length[body["max_tokens"]].append(entry)
    assert sorted(by_length) == sorted({r.output_tokens for r in trace.requests})
    # Prefix sharing: two lines whose hash_ids agree for k blocks share (at least) k blocks of text.
    texts = [
        e["body"]["messages"][0]["content"]
        for e in sorted(entries, key=lambda e: e["t_recv"])
        if e["body"]["model"] == "llama-3-70b"
    ]
    ordered = sorted(trace.requests, key=lambda r: (r.offset_s, r.line))
    for (i, a), (j, b) in ((x, y) for x in enumerate(ordered) for y in enumerate(ordered) if x[0] < y[0]):
        common = 0
        while common < min(len(a.hash_ids), len(b.hash_ids)) and a.hash_ids[common] == b.hash_ids[common]:
            common += 1
        if common and i < len(texts) and j < len(texts):
            prefix = len(_common_prefix(texts[i], texts[j]))
            assert prefix >= common * 512 * 4 * 0.9, (a.hash_ids, b.hash_ids, prefix)
        elif not common and i < len(texts) and j < len(texts):
            assert len(_common_prefix(texts[i], texts[j])) < 19 + 64  # the run salt, then different text
    for model in data["models"]:
        stage = model["stages"][0]
        assert stage["trace_arrival_rate_per_s"] == pytest.approx(trace.arrival_rate_per_s, rel=1e-6)
        assert stage["achieved_rate_per_s"] == pytest.approx(trace.arrival_rate_per_s, rel=0.05)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def test_replay_speed_two_halves_the_offsets(processes: Processes, tmp_path: Path) -> None:
    """(c) --replay-speed 2: the first 12 lines (~3 s of trace) arrive at half their offsets."""
    from attnload.workload.trace import load_trace

    lines = (ROOT / "examples" / "traces" / "mooncake_sample.jsonl").read_text().splitlines()[:12]
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines) + "\n")
    trace = load_trace(short)
    url, log = start_recorder(processes, tmp_path, chunk_delay_ms=0)
    config = write_config(tmp_path, url, {"gqa_model": MODELS["gqa_model"]}, workload={"p": {"prompt_tokens": 100}})
    run(
        processes, config, tmp_path / "r", "--shape", f"replay:{short}", "--replay-speed", "2", "--stage-duration", "5s"
    )
    offsets = _offsets_by_model(received(log))["llama-3-70b"]
    expected = [r.offset_s / 2 for r in trace.requests]
    assert len(offsets) == len(expected)
    errors = sorted(abs(a - e) for a, e in zip(offsets, expected, strict=True))
    assert errors[-1] <= 0.030, errors[-3:]


def test_sim_prefix_cache_grows_with_the_turn(processes: Processes, tmp_path: Path) -> None:
    """(d) against `attnload sim`: cached prompt tokens rise with the turn index; the turn table is in the results."""
    sim = start_sim(processes)
    config = write_config(
        tmp_path,
        sim + "/api",
        workload={"chat": {"conversation": {"turns": 4, "think_time_s": 0.05, "user_tokens": 300}, "max_tokens": 32}},
    )
    data = run(processes, config, tmp_path / "r", "--users", "4", "--duration", "8s", "--spawn-rate", "20")
    for model in data["models"]:
        rows = sorted(model["turns"], key=lambda row: row["turn"])
        assert [row["turn"] for row in rows][:4] == [1, 2, 3, 4]
        cached = [row["cached_tokens_mean"] or 0.0 for row in rows[:4]]
        assert cached[0] < cached[1] < cached[2] < cached[3], cached
        assert model["ttft_by_prompt_tokens"], model.keys()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ('{"prompt": "fine"}\n{"prompt": oops}\n', "line 2"),
        ("", "empty"),
    ],
)
def test_bad_dataset_is_one_line_and_exit_2(
    processes: Processes, tmp_path: Path, content: str | None, message: str
) -> None:
    """(d) a missing path, a malformed line (with its number) or an empty file: one line, exit 2, no load."""
    url, log = start_recorder(processes, tmp_path)
    path = tmp_path / "data.jsonl"
    if content is not None:
        path.write_text(content)
    config = write_config(tmp_path, url, MODELS, workload={"d": {"dataset": {"path": str(path)}}})
    process = processes.start(
        attnload(
            "run",
            "-c",
            str(config),
            "--results",
            str(tmp_path / "r"),
            "--users",
            "1",
            "--duration",
            "3s",
            "--metrics-port",
            str(free_port()),
        ),
        name="run",
    )
    assert process.wait(timeout=60) == 2
    output = processes.log_of(process).strip()
    assert len(output.splitlines()) == 1 and message in output and "Traceback" not in output, output
    time.sleep(0.2)
    assert received(log) == []


def test_tokenizer_sizes_messages_and_counts_tokens_without_usage(processes: Processes, tmp_path: Path) -> None:
    """A model's tokenizer.json builds each user message to its exact token target and, as the server
    sends no usage, counts prompt and completion tokens (the estimator would count other numbers)."""
    from attnload.workload.tokenizer import load_tokenizer
    from test_workload_tokenizer import word_level

    path = word_level(tmp_path)
    tokens = load_tokenizer(path)
    url, log = start_recorder(processes, tmp_path, chunk_delay_ms=0)
    config = write_config(
        tmp_path,
        url,
        {"gqa_model": MODELS["gqa_model"]},
        workload={"chat": {"conversation": {"turns": 2, "user_tokens": 30}, "max_tokens": 8}},
    )
    data = json.loads(config.read_text())
    data["models"]["gqa_model"]["tokenizer"] = str(path)
    config.write_text(json.dumps(data))
    result = run(processes, config, tmp_path / "r", "--users", "1", "--duration", "3s", "--stop-timeout", "5")
    entries = received(log)
    assert entries
    for entry in entries:
        user = [m["content"] for m in entry["body"]["messages"] if m["role"] == "user"]
        assert all(tokens.count(text) == 30 - 4 for text in user), [tokens.count(t) for t in user]
    summary = result["models"][0]
    done = entries  # --stop-timeout: the last request finishes, so every logged one is counted
    prompt = sum(sum(tokens.count(m["content"]) + 4 for m in e["body"]["messages"]) for e in done)
    completion = sum(tokens.count(e["reply"]) for e in done)
    ok = summary["requests"]["ok"]
    assert ok == len(done) and summary["estimated_tokens"] is True
    assert summary["prompt_tokens"] == prompt and summary["completion_tokens"] == completion


def test_open_loop_conversations_schedule_turns_after_answer_and_think(processes: Processes, tmp_path: Path) -> None:
    """rate: stages: each arrival starts a conversation; its next turn is due think time after the answer."""
    url, log = start_recorder(processes, tmp_path)
    config = write_config(
        tmp_path,
        url,
        MODELS,
        workload={"chat": {"conversation": {"turns": 3, "think_time_s": 0.2, "user_tokens": 30}, "max_tokens": 8}},
    )
    run(
        processes,
        config,
        tmp_path / "r",
        "--shape",
        "rate:2",
        "--stage-duration",
        "4s",
        "--arrivals",
        "constant",
        "--stop-timeout",
        "5",
    )
    groups = conversations(received(log))
    assert len(groups) >= 12, len(groups)  # 2 conversations/s per model over 4 s (both models)
    gaps = []
    for turns in groups.values():
        for previous, current in zip(turns, turns[1:], strict=False):
            before = previous["body"]["messages"]
            assert current["body"]["messages"][: len(before) + 1] == [
                *before,
                {"role": "assistant", "content": previous["reply"]},
            ]
            gaps.append(current["t_recv"] - previous["t_end"])
    assert gaps and min(gaps) >= 0.2 - 0.02 and statistics.median(gaps) <= 0.2 + 0.05, sorted(gaps)
