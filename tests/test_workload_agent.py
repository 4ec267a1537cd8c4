"""Agent sessions without a server: the config block, the step state machine, token counts with tools,
the session trace reader, the simulator's cache-aware routing and the tool-choice error explained."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from attnload.client.classify import TOOL_CHOICE_FIX, classify_status
from attnload.config.model import AgentSpec, Profile
from attnload.errors import ErrorClass, UsageError
from attnload.measure.context import ContextRecorder
from attnload.measure.recorder import RequestRecord
from attnload.measure.tokens import prompt_tokens, text_tokens, tools_tokens
from attnload.results.context import context_fields
from attnload.workload.agent import AgentConversation, agent_script, tool_definitions
from attnload.workload.sessiontrace import is_session_trace, load_sessions

ROOT = Path(__file__).resolve().parents[1]
SALT = "[0123456789abcdef] "


def spec(**values: object) -> AgentSpec:
    return AgentSpec.model_validate({"steps": 3, **values})


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ({"steps": -1}, "agent.steps must be at least 1"),
        ({"steps": 0}, "agent.steps must be at least 1"),
        ({"steps": 1001}, "at most 1,000 steps"),
        ({"steps": {"dist": "uniform", "min": 1, "max": 5000}}, "at most 1,000 steps"),
        ({"steps": 3, "tool_result_tokens": -5}, "tool_result_tokens"),
        ({"steps": 3, "tools": -1}, "agent.tools must be at least 0"),
        ({"steps": 3, "parallel_calls": 0}, "parallel_calls"),
        ({"steps": 3, "tool_time_s": -1}, "tool_time_s"),
        ({"steps": 3, "tool_choice": "sometimes"}, "tool_choice"),
        ({"steps": 3, "tool_budget": 1}, "tool_budget"),
    ],
)
def test_bad_agent_blocks_are_refused(block: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError) as info:
        AgentSpec.model_validate(block)
    assert words in str(info.value)


def test_agent_defaults_and_shorthand() -> None:
    agent = spec(tools=6)
    assert agent.tools.count == 6 and agent.tool_choice is None and agent.parallel_calls == 1
    assert Profile(name="a", agent=agent).conversational
    with pytest.raises(ValidationError, match="pick one"):
        Profile.model_validate({"name": "a", "agent": {"steps": 2}, "conversation": {"turns": 2, "user_tokens": 9}})


def test_tool_definitions_have_their_size_and_no_salt() -> None:
    tools = tool_definitions(spec(tools={"count": 3, "tokens": 200}).tools)
    assert len(tools) == 3 and [t["function"]["name"] for t in tools] == ["tool_0", "tool_1", "tool_2"]
    assert all(abs(tools_tokens([t]) - 200) <= 2 for t in tools)
    assert tools == tool_definitions(spec(tools={"count": 3, "tokens": 200}).tools)  # every session the same


def test_steps_grow_by_reply_call_and_result_of_the_drawn_size() -> None:
    agent = spec(steps=3, system_tokens=100, tool_result_tokens=250, parallel_calls=2, tool_choice="none")
    script = agent_script(agent, SALT, random.Random(1))
    assert script.steps == 3 and script.tool_choice == "none" and script.system.startswith(SALT)
    session = AgentConversation(script)
    first = session.next_request()
    assert first is not None and [m["role"] for m in first[0]] == ["system", "user"]
    assert first[2] == prompt_tokens(first[0]) + tools_tokens(list(script.tools))
    assert abs(prompt_tokens(first[0][:1]) - 100) <= 1
    session.record_reply('Reply "1" \\ ü  ')
    second = session.next_request()
    assert second is not None and second[0][:2] == first[0]
    reply, call, *results = second[0][2:]
    assert reply == {"role": "assistant", "content": 'Reply "1" \\ ü  '}
    assert call["role"] == "assistant" and len(call["tool_calls"]) == 2
    assert [r["tool_call_id"] for r in results] == [c["id"] for c in call["tool_calls"]]
    assert all(r["role"] == "tool" and text_tokens(r["content"]) == 250 for r in results)
    session.record_reply("two")
    assert session.next_request() is not None
    session.record_reply("three")
    assert session.next_request() is None and session.ended == "steps"


def test_a_session_ends_at_max_context_counted_not_failed() -> None:
    script = agent_script(spec(steps=10, system_tokens=100, tool_result_tokens=400), SALT, random.Random(2))
    session = AgentConversation(script, context_window_tokens=1500, default_max_tokens=64)
    taken = 0
    while session.next_request() is not None:
        taken += 1
        session.record_reply("ok")
    assert session.ended == "context" and 1 < taken < 10


def test_steps_and_sessions_reach_the_results() -> None:
    context = ContextRecorder()
    for step, cached in ((1, None), (2, 900), (2, 1100)):
        context.add(
            RequestRecord("m", "agent", 0, "ok", None, 0.1 * step, (), 0.5, 1000 * step, 10, cached, False, step=step)
        )
    context.sessions.add("m", "steps", 3, 4.0, 6000, 30)
    context.sessions.add("m", "context", 2, 2.0, 3000, 20)
    master = ContextRecorder()
    master.merge_delta(json.loads(json.dumps(context.take_delta())))
    fields = context_fields(master, "m")
    rows = {row.step: row for row in fields["steps"]}
    assert rows[1].cached_tokens_mean is None and rows[2].cached_tokens_mean == 1000
    assert rows[2].context_tokens == 2000 and rows[2].ttft_s.count == 2 and rows[2].step_time_s.count == 2
    done = fields["agent_sessions"]
    assert (done.sessions, done.ended_steps, done.ended_context, done.steps_completed_mean) == (2, 1, 1, 2.5)
    assert done.prompt_tokens_mean == 4500 and done.duration_s.count == 2


def test_vllms_tool_choice_refusal_names_the_server_flags() -> None:
    body = json.dumps(
        {
            "error": {
                "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                "type": "BadRequestError",
                "code": 400,
            }
        }
    ).encode()
    failure = classify_status(400, body)
    assert failure.kind is ErrorClass.BAD_REQUEST and TOOL_CHOICE_FIX in failure.detail
    assert "--enable-auto-tool-choice" in TOOL_CHOICE_FIX and "tool_choice" in TOOL_CHOICE_FIX
    assert TOOL_CHOICE_FIX not in classify_status(400, b'{"error": {"message": "bad temperature"}}').detail


def test_the_sample_session_trace_reads_in_order() -> None:
    path = ROOT / "examples" / "traces" / "agent_sessions_sample.jsonl"
    assert is_session_trace(path) and not is_session_trace(ROOT / "examples" / "traces" / "mooncake_sample.jsonl")
    sessions = load_sessions(path)
    assert [s.session_id for s in sessions] == ["s1", "s2", "s3", "s4", "s5"]
    assert [len(s.steps) for s in sessions] == [3, 4, 3, 4, 3]
    assert sessions[0].steps[2].wait_s == pytest.approx(0.25)  # tool time + delay
    assert load_sessions(path, speed=2.0)[1].start_s == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        ([{"session_id": "a", "step": 2, "input_tokens": 5, "output_tokens": 5}], "without gaps"),
        ([{"session_id": "a", "step": 1, "input_tokens": 0, "output_tokens": 5}], "input_tokens"),
        (
            [
                {"session_id": "a", "step": 1, "input_tokens": 5, "output_tokens": 5},
                {"session_id": "a", "step": 2, "input_tokens": 5, "output_tokens": 5, "tool_time_s": -1},
            ],
            "tool_time_s",
        ),
        ([{"session_id": "a", "step": 1, "input_tokens": 5, "output_tokens": 5}] * 2, "twice"),
    ],
)
def test_bad_session_traces_are_one_line_errors(tmp_path: Path, lines: list[dict[str, object]], words: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(UsageError, match=words):
        load_sessions(path)


def test_a_fan_out_step_waits_for_its_children_answers() -> None:
    agent = spec(steps=3, tool_result_tokens=20, sub_agents={"count": 3, "steps": 2, "every": 2})
    script = agent_script(agent, SALT, random.Random(3))
    assert script.fan_out == (2,) and script.children == 3
    session = AgentConversation(script)
    session.next_request()
    session.record_reply("one")
    assert session.children_pending == 0
    session.next_request()
    session.record_reply("two")
    assert session.children_pending == 3
    with pytest.raises(RuntimeError):
        session.next_request()
    session.children_done(["a", "b", "c"])
    taken = session.next_request()
    assert taken is not None
    call, *results = taken[0][-4:]
    assert [c["function"]["name"] for c in call["tool_calls"]] == ["sub_agent"] * 3
    assert [r["content"] for r in results] == ["a", "b", "c"]
