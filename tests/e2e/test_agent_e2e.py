"""Agent sessions end to end: a recording server checks what each step carries and when it arrives, the
simulator shows GQA's idle sessions evicted where MLA's stay resident, and a bad agent block sends nothing.

Server-side evidence first: the recording server logs each body with the wall time it arrived and the time
its answer ended, so the step structure, the tool times and the open sessions are never the client's word.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from attnload.measure.tokens import text_tokens
from helpers import FAKES, ROOT, Processes, attnload, free_port, latest_results, start_sim, wait_http, write_config

MODELS = {"gqa_model": ("llama-3-70b", "GQA"), "mla_model": ("deepseek-v3", "MLA")}


def start_recorder(processes: Processes, tmp_path: Path, *flags: str) -> tuple[str, Path]:
    port, log = free_port(), tmp_path / "received.jsonl"
    process = processes.start(
        [sys.executable, str(FAKES / "recording_server.py"), str(port), str(log), "1", "nodelay", *flags],
        name="rec",
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


def sessions(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Requests grouped by session (its salted system prompt), in arrival order."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in sorted(entries, key=lambda e: e["t_recv"]):
        grouped[entry["body"]["model"] + "|" + entry["body"]["messages"][0]["content"]].append(entry)
    return grouped


def test_each_step_resends_history_reply_tool_call_and_result(processes: Processes, tmp_path: Path) -> None:
    """Step k = step k−1's messages + the reply as streamed + a tool call + a `role: tool` result of the
    drawn size, `tools` on every request, no `tool_choice`; the tool time separates an answer from the next
    step (server side, p50 within 20 ms); as many sessions are open at once as there are users."""
    url, log = start_recorder(processes, tmp_path)
    tool_time, result_tokens, users = 0.3, 300, 3
    agent = {
        "steps": 4,
        "system_tokens": 200,
        "tools": {"count": 3, "tokens": 60},
        "tool_result_tokens": result_tokens,
        "tool_time_s": tool_time,
    }
    config = write_config(
        tmp_path, url, {"gqa_model": MODELS["gqa_model"]}, workload={"agent": {"agent": agent, "max_tokens": 16}}
    )
    data = run(
        processes,
        config,
        tmp_path / "r",
        "--users",
        str(users),
        "--duration",
        "5s",
        "--spawn-rate",
        "100",
        "--requests-out",
        str(tmp_path / "req.jsonl"),
    )
    groups = sessions(received(log))
    complete = [g for g in groups.values() if len(g) == 4]
    assert len(complete) >= users, {k[-20:]: len(v) for k, v in groups.items()}
    gaps = []
    for steps in groups.values():
        assert len(steps) <= 4  # a session never runs past its steps
        for entry in steps:
            body = entry["body"]
            assert len(body["tools"]) == 3 and "tool_choice" not in body
        for previous, current in zip(steps, steps[1:], strict=False):
            sent, before = current["body"]["messages"], previous["body"]["messages"]
            assert sent[: len(before)] == before
            assert sent[len(before)] == {"role": "assistant", "content": previous["reply"]}  # byte for byte
            call, result = sent[len(before) + 1], sent[len(before) + 2]
            assert call["role"] == "assistant" and len(call["tool_calls"]) == 1
            assert result == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": result["content"]}
            assert abs(text_tokens(result["content"]) - result_tokens) <= 4  # the estimator's tolerance
            assert len(sent) == len(before) + 3
            gaps.append(current["t_recv"] - previous["t_end"])
    assert abs(statistics.median(gaps) - tool_time) <= 0.02, sorted(gaps)
    # Sessions open at once: from a session's first arrival to its last answer, sampled mid-run.
    spans = [(g[0]["t_recv"], g[-1]["t_end"]) for g in complete]
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    open_counts = [
        sum(1 for g in groups.values() if g[0]["t_recv"] <= t <= g[-1]["t_end"])
        for t in (start + (end - start) * k / 40 for k in range(8, 33))
    ]
    assert max(open_counts) == users and statistics.median(open_counts) == users, open_counts
    rows = {row["step"]: row for row in data["models"][0]["steps"]}
    assert set(rows) == {1, 2, 3, 4}
    assert rows[1]["context_tokens"] < rows[2]["context_tokens"] < rows[3]["context_tokens"]
    assert rows[2]["context_tokens"] - rows[1]["context_tokens"] >= result_tokens
    assert rows[2]["cached_tokens_mean"] is None  # the recorder reports none
    assert data["models"][0]["agent_sessions"]["ended_steps"] >= users
    lines = [json.loads(line) for line in (tmp_path / "req.jsonl").read_text().splitlines()]
    assert {line["step"] for line in lines} == {1, 2, 3, 4}
    assert all(line["session"] for line in lines) and len({line["session"] for line in lines}) >= users


def test_idle_gqa_sessions_are_evicted_where_mla_stays_resident(processes: Processes, tmp_path: Path) -> None:
    """Equal KV bytes for both models (scales in the ratio of their KV bytes per token): GQA cannot hold
    every idle session while its tool runs, MLA can; so MLA hits more, caches more per step, and GQA's
    TTFT after step 1 is the higher one."""
    models = tmp_path / "sim.json"
    models.write_text(
        json.dumps(
            {
                "models": [
                    {"id": "llama-3-70b", "kv_capacity_scale": 0.0125},
                    {"id": "deepseek-v3", "kv_capacity_scale": 0.0446},
                ]
            }
        )
    )
    sim = start_sim(processes, "--config", str(models))
    agent = {
        "steps": 8,
        "system_tokens": 1000,
        "tools": {"count": 4, "tokens": 100},
        "tool_result_tokens": 2000,
        "tool_time_s": 0.5,
    }
    config = write_config(tmp_path, sim + "/api", MODELS, workload={"agent": {"agent": agent, "max_tokens": 32}})
    data = run(processes, config, tmp_path / "r", "--users", "16", "--duration", "15s", "--spawn-rate", "100")
    by_model = {m["key"]: m for m in data["models"]}
    cached, ttft, hit = {}, {}, {}
    for key, model in by_model.items():
        rows = {row["step"]: row for row in model["steps"]}
        assert {1, 2, 3, 4, 5} <= set(rows), sorted(rows)
        later = [rows[s] for s in sorted(rows) if s >= 4 and rows[s]["requests"]]
        cached[key] = statistics.mean(r["cached_tokens_mean"] for r in later)
        hit[key] = sum(r["cached_tokens_mean"] * r["requests"] for r in later) / sum(
            r["context_tokens"] * r["requests"] for r in later
        )
        ttft[key] = weighted_median([(rows[s]["ttft_s"]["p50"], rows[s]["requests"]) for s in rows if s >= 2])
        print(key, [(s, rows[s]["requests"], rows[s]["cached_tokens_mean"], rows[s]["ttft_s"]["p50"]) for s in rows])
    print(f"cached per step (4+): {cached}; hit ratio {hit}; step TTFT p50 after step 1 {ttft}")
    assert hit["mla_model"] > hit["gqa_model"] and cached["mla_model"] > cached["gqa_model"]
    assert ttft["gqa_model"] > ttft["mla_model"]


def weighted_median(pairs: list[tuple[float, int]]) -> float:
    """The median of per-step p50s, each counted as often as its step had requests."""
    ordered = sorted(pairs)
    half, seen = sum(n for _, n in ordered) / 2.0, 0
    for value, n in ordered:
        seen += n
        if seen >= half:
            return value
    return ordered[-1][0]


def test_a_bad_agent_block_exits_2_and_sends_nothing(processes: Processes, tmp_path: Path) -> None:
    url, log = start_recorder(processes, tmp_path)
    for agent, words in (
        ({"steps": -1}, "steps"),
        ({"steps": 3, "tool_result_tokens": -5}, "tool_result_tokens"),
        ({"steps": 3, "tool_budget": 1}, "tool_budget"),
        ({"steps": 100_000}, "steps"),
        ({"steps": 3, "tools": -2}, "tools"),
    ):
        config = write_config(tmp_path, url, {"gqa_model": MODELS["gqa_model"]}, workload={"a": {"agent": agent}})
        process = processes.start(attnload("run", "-c", str(config), "-u", "1", "-t", "2s"), name="bad")
        assert process.wait(timeout=60) == 2
        err = processes.log_of(process).strip()
        assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err, err
    assert received(log) == []


def test_a_session_trace_replays_steps_in_order_after_each_answer(processes: Processes, tmp_path: Path) -> None:
    """The 5-session sample trace: each session starts at its offset, each step goes its tool time (+ delay)
    after the previous answer (server side, within 30 ms p99), resending the history with the streamed reply,
    a tool call and a tool result that brings the prompt to the trace's input tokens."""
    from attnload.measure.tokens import prompt_tokens
    from attnload.workload.sessiontrace import load_sessions

    trace = ROOT / "examples" / "traces" / "agent_sessions_sample.jsonl"
    recorded = load_sessions(trace)
    url, log = start_recorder(processes, tmp_path)
    config = write_config(tmp_path, url, {"gqa_model": MODELS["gqa_model"]})
    data = run(processes, config, tmp_path / "r", "--shape", f"replay:{trace}", "--stage-duration", "5s")
    groups = sorted(
        (sorted(g, key=lambda e: e["t_recv"]) for g in sessions_by_first_user(received(log)).values()),
        key=lambda g: g[0]["t_recv"],
    )
    assert len(groups) == len(recorded) == 5
    origin = groups[0][0]["t_recv"]
    errors = []
    for steps, session in zip(groups, recorded, strict=True):
        assert len(steps) == len(session.steps), session.session_id
        errors.append(abs((steps[0]["t_recv"] - origin) - session.start_s))
        for k, (previous, current) in enumerate(zip(steps, steps[1:], strict=False), start=1):
            sent, before = current["body"]["messages"], previous["body"]["messages"]
            assert sent[: len(before)] == before and sent[len(before)]["content"] == previous["reply"]
            assert sent[-1]["role"] == "tool" and "tool_calls" in sent[-2]
            assert abs(prompt_tokens(sent) - session.steps[k].input_tokens) <= 4
            gap = current["t_recv"] - previous["t_end"]
            assert gap >= session.steps[k].wait_s - 0.005, (session.session_id, k, gap)
            errors.append(gap - session.steps[k].wait_s)
    print("errors", [round(e, 4) for e in errors])
    errors.sort()
    assert errors[int(0.99 * (len(errors) - 1))] <= 0.03, [round(e, 4) for e in errors]
    rows = {row["step"]: row for row in data["models"][0]["steps"]}
    assert rows[1]["requests"] == 5 and rows[4]["requests"] == 2


def sessions_by_first_user(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in entries:
        grouped[entry["body"]["messages"][0]["content"]].append(entry)
    return grouped


def test_sub_agents_fan_out_and_return_as_tool_results(processes: Processes, tmp_path: Path) -> None:
    """A fan-out step's `sub_agent` calls run child sessions at once; each child's last answer comes back
    as the parent's tool result, and the parent's next step follows the last child's answer."""
    url, log = start_recorder(processes, tmp_path)
    agent = {
        "steps": 2,
        "system_tokens": 64,
        "tools": 1,
        "tool_result_tokens": 50,
        "tool_time_s": 0.05,
        "sub_agents": {"count": 2, "steps": 2, "every": 1},
    }
    config = write_config(
        tmp_path, url, {"gqa_model": MODELS["gqa_model"]}, workload={"a": {"agent": agent, "max_tokens": 8}}
    )
    run(processes, config, tmp_path / "r", "--users", "1", "--duration", "3s", "--spawn-rate", "10")
    entries = received(log)
    by_reply = {e["reply"]: e for e in entries}
    parents = [e for e in entries if any(m.get("tool_calls") for m in e["body"]["messages"])]
    checked = 0
    for entry in parents:
        messages = entry["body"]["messages"]
        call = next(m for m in messages if m.get("tool_calls"))
        if call["tool_calls"][0]["function"]["name"] != "sub_agent":
            continue  # a child's own step 2
        results = [m for m in messages if m["role"] == "tool"]
        assert len(call["tool_calls"]) == 2 and len(results) == 2
        children = [by_reply[r["content"]] for r in results]  # each result is a child's answer
        for child in children:
            assert child["body"]["messages"][0]["content"] != messages[0]["content"]  # its own session
            assert len(child["body"]["messages"]) > 2 and child["body"]["tools"]  # its last step
            assert entry["t_recv"] >= child["t_end"] - 0.01  # after its answer (the server notes t_end last)
        checked += 1
    assert checked >= 1, len(entries)


def test_vllms_tool_choice_refusal_is_one_line_naming_the_server_flags(processes: Processes, tmp_path: Path) -> None:
    """A server that refuses `tools` with the default tool choice (vLLM 0.32 without tool-call parsing):
    `run` says once which server flags to set, `check` gives it as the fix; `tool_choice: none` is served."""
    url, log = start_recorder(processes, tmp_path, "refuse-auto-tools")
    agent: dict[str, Any] = {"steps": 2, "system_tokens": 64, "tools": 1, "tool_time_s": 0.05}
    config = write_config(tmp_path, url, {"gqa_model": MODELS["gqa_model"]}, workload={"a": {"agent": agent}})
    check = processes.start(attnload("check", "-c", str(config)), name="check")
    assert check.wait(timeout=120) == 1
    said = processes.log_of(check)
    assert "--enable-auto-tool-choice" in said and "tool_choice" in said, said[-2000:]
    process = processes.start(
        attnload("run", "-c", str(config), "-u", "1", "-t", "2s", "--results", str(tmp_path / "r")), name="run"
    )
    process.wait(timeout=120)
    said = processes.log_of(process)
    lines = [line for line in said.splitlines() if "agent steps are refused" in line]  # the fix, said once
    assert len(lines) == 1 and "gqa_model" in lines[0] and "--enable-auto-tool-choice" in lines[0], lines
    assert '"auto\\" tool choice requires' in said  # and the error example under the table quotes the server
    agent["tool_choice"] = "none"
    config = write_config(tmp_path, url, {"gqa_model": MODELS["gqa_model"]}, workload={"a": {"agent": agent}})
    data = run(processes, config, tmp_path / "r2", "-u", "1", "-t", "2s")
    assert data["models"][0]["requests"]["failed"] == 0 and data["models"][0]["steps"]
    agent_requests = [entry for entry in received(log) if entry["body"].get("tools")]
    assert agent_requests and all(entry["body"]["tool_choice"] == "none" for entry in agent_requests)
