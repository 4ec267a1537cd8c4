"""Dataset files: streamed index, seeded order, each record before repeats, line-numbered errors."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from attnload.config.model import Distribution
from attnload.errors import UsageError
from attnload.measure.tokens import text_tokens
from attnload.workload import jsonscan
from attnload.workload.dataset import (
    DatasetSampler,
    DatasetSpec,
    open_dataset,
    resolve_output_tokens,
    user_turns,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "datasets"


def sharegpt(tmp_path: Path, records: list[Any], name: str = "d.json", indent: int | None = 1) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(records, indent=indent, ensure_ascii=False))
    return path


def jsonl(tmp_path: Path, lines: list[str], name: str = "d.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def conv(*turns: str) -> dict[str, Any]:
    roles = ("human", "gpt")
    return {"conversations": [{"from": roles[i % 2], "value": text} for i, text in enumerate(turns)]}


def test_sharegpt_records_keep_turns_replies_and_estimated_reply_tokens(tmp_path: Path) -> None:
    path = sharegpt(
        tmp_path, [conv("hi there", "hello! how can I help?", "tell me a joke", "no"), conv("only a question")]
    )
    with open_dataset(path) as data:
        assert data.format == "sharegpt" and len(data) == 2 and data.skipped == 0
        first = data.record(0)
        assert first.user_turns == ("hi there", "tell me a joke")
        assert first.assistant_replies == ("hello! how can I help?", "no")
        assert first.reply_tokens == (text_tokens("hello! how can I help?"), 1) == (6, 1)
        assert first.line == 2  # the element's "{" is on line 2 of the indented array
        assert data.record(1).user_turns == ("only a question",) and data.record(1).assistant_replies == ()


def test_sharegpt_system_merge_and_skips_records_without_human_text(tmp_path: Path) -> None:
    records = [
        {
            "conversations": [
                {"from": "system", "value": "be brief"},
                {"from": "gpt", "value": "hello"},
                {"from": "human", "value": "a"},
                {"from": "human", "value": "b"},
                {"from": "chatgpt", "value": "c"},
            ]
        },
        {"conversations": []},
        {"conversations": [{"from": "gpt", "value": "nobody asked"}]},
        conv("ünïcode ✓ question", "réponse"),
    ]
    with open_dataset(sharegpt(tmp_path, records)) as data:
        assert len(data) == 2 and data.skipped == 2
        first = data.record(0)
        assert (first.system, first.user_turns, first.assistant_replies) == ("be brief", ("a\n\nb",), ("c",))
        assert data.record(1).user_turns == ("ünïcode ✓ question",)


def test_sharegpt_scan_crosses_chunk_boundaries_with_exact_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jsonscan, "CHUNK_BYTES", 7)  # every record spans many reads; multi-byte text too
    records = [conv(f"question {i} ✓ " + "x" * (i * 13), f"answer {i}") for i in range(25)]
    path = sharegpt(tmp_path, records, indent=None)
    with open_dataset(path) as data:
        assert len(data) == 25
        assert [data.record(i).user_turns[0] for i in range(25)] == [r["conversations"][0]["value"] for r in records]
    lines = [json.dumps(conv(f"q{i} ✓", "a")) for i in range(30)]
    lines[21] = lines[21].replace('"a"', "a")  # line 23 of the file (the array opens on line 1)
    broken = tmp_path / "broken.json"
    broken.write_text("[\n" + ",\n".join(lines) + "\n]\n")
    with pytest.raises(UsageError, match=rf"^dataset {broken} line 23: malformed JSON"):
        open_dataset(broken)


def test_jsonl_prompt_messages_and_max_tokens(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path,
        [
            json.dumps({"prompt": "p1", "max_tokens": 7}),
            "",
            json.dumps(
                {
                    "messages": [
                        {"role": "system", "content": "sys"},
                        {"role": "user", "content": "u1"},
                        {"role": "assistant", "content": "a1 a1"},
                        {"role": "user", "content": "u2"},
                    ]
                }
            ),
            json.dumps(conv("q", "r")),
        ],
    )
    with open_dataset(path) as data:
        assert data.format == "jsonl" and len(data) == 3
        assert (data.record(0).user_turns, data.record(0).max_tokens, data.record(0).line) == (("p1",), 7, 1)
        second = data.record(1)
        assert (second.system, second.user_turns, second.assistant_replies, second.line) == (
            "sys",
            ("u1", "u2"),
            ("a1 a1",),
            3,
        )
        assert data.record(2).user_turns == ("q",)


def test_same_seed_same_order_and_every_record_before_a_repeat(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [json.dumps({"prompt": f"p{i}"}) for i in range(10)])
    with open_dataset(path) as data:
        one = DatasetSampler(data, seed=42)
        two = DatasetSampler(data, seed=42)
        first = [one.next().user_turns[0] for _ in range(30)]
        assert first == [two.next().user_turns[0] for _ in range(30)]
        expected = [f"p{n}" for e in range(3) for n in DatasetSampler(data, seed=42).order(e)]
        assert first == expected
        for epoch in range(3):  # each epoch is a permutation: all ten before any repeat
            assert sorted(first[epoch * 10 : (epoch + 1) * 10]) == sorted(f"p{i}" for i in range(10))
        assert first[:10] != first[10:20]  # reshuffled per epoch
        other = DatasetSampler(data, seed=43)
        assert [other.next().user_turns[0] for _ in range(10)] != first[:10]
        assert one.epoch == 2


def test_shards_split_one_global_order(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [json.dumps({"prompt": f"p{i}"}) for i in range(7)])
    with open_dataset(path) as data:
        whole = DatasetSampler(data, seed=5)
        global_order = [whole.next_number() for _ in range(21)]
        shards = [DatasetSampler(data, seed=5, shard=k, shards=3) for k in range(3)]
        taken = {k: [shards[k].next_number() for _ in range(5)] for k in range(3)}
        for k in range(3):
            assert taken[k] == global_order[k::3][:5]
        # the fleet's first 7 draws (one round-robin pass over shards) use every record once
        assert sorted(global_order[:7]) == list(range(7))


@pytest.mark.parametrize(
    ("lines", "line_no", "needle"),
    [
        (['{"prompt": "ok"}', '{"prompt": "broken"', '{"prompt": "fine"}'], 2, "malformed JSON"),
        (['{"prompt": "ok"}', "", "[1, 2]"], 3, "must be a JSON object"),
        (['{"prompt": "ok"}', '{"text": "x"}'], 2, 'needs "prompt"'),
        (['{"prompt": "ok", "max_tokens": 0}'], 1, "max_tokens must be a positive integer"),
        (['{"messages": [{"role": "user"}]}'], 1, "messages[0]"),
        (['{"prompt": ""}'], 1, "no non-empty user message"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path: Path, lines: list[str], line_no: int, needle: str) -> None:
    path = jsonl(tmp_path, lines)
    with pytest.raises(UsageError) as info:
        open_dataset(path)
    message = str(info.value)
    assert message.startswith(f"dataset {path} line {line_no}: ") and needle in message
    assert "\n" not in message


def test_sharegpt_errors_name_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        '[\n {"conversations": [{"from": "human", "value": "a"}]},\n {"conversations": [\n  {"from": "human", '
        '"value": 3}]},\n]'
    )
    with pytest.raises(UsageError, match=rf"^dataset {bad} line 3: conversations\[0\] needs a string \"value\""):
        open_dataset(bad)
    broken = tmp_path / "broken.json"
    broken.write_text('[\n {"conversations": []},\n {"conversations": [}\n]')
    with pytest.raises(UsageError, match=rf"^dataset {broken} line 3: malformed JSON"):
        open_dataset(broken)
    cut = tmp_path / "cut.json"
    cut.write_text('[\n {"conversations": [{"from": "human", "value": "a"}]},\n')
    with pytest.raises(UsageError, match="never closes"):
        open_dataset(cut)
    wrong = sharegpt(tmp_path, [{"turns": []}], name="wrong.json")
    with pytest.raises(UsageError, match=r'line 2: a ShareGPT record needs a "conversations" list'):
        open_dataset(wrong)


def test_missing_empty_and_unusable_files_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no such file; give the local path"):
        open_dataset(tmp_path / "nope.json")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(UsageError, match=r"the file is empty"):
        open_dataset(empty)
    with pytest.raises(UsageError, match=r"no usable record \(1 records without human text\)"):
        open_dataset(sharegpt(tmp_path, [{"conversations": []}], name="none.json"))
    text = tmp_path / "text.txt"
    text.write_text("hello\n")
    with pytest.raises(UsageError, match="line 1: neither a JSON array"):
        open_dataset(text)
    with pytest.raises(UsageError, match="not a regular file"):
        open_dataset(tmp_path)


def test_format_can_be_forced(tmp_path: Path) -> None:
    path = jsonl(tmp_path, [json.dumps({"prompt": "x"})])
    with pytest.raises(UsageError, match="expected a JSON array"):
        open_dataset(path, "sharegpt")


def test_output_tokens_resolution(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path,
        [
            json.dumps({"prompt": "p", "max_tokens": 9}),
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": "u"},
                        {"role": "assistant", "content": "x" * 41},
                        {"role": "user", "content": "v"},
                    ]
                }
            ),
        ],
    )
    rng = random.Random(0)
    with open_dataset(path) as data:
        fixed, recorded = data.record(0), data.record(1)
        assert resolve_output_tokens("dataset", fixed, 0, rng) == 9
        assert resolve_output_tokens("dataset", recorded, 0, rng) == 11  # ceil(41 / 4)
        assert resolve_output_tokens("dataset", recorded, 1, rng) is None  # no recorded reply
        assert resolve_output_tokens(64, recorded, 0, rng) == 64
        uniform = Distribution(dist="uniform", min=5, max=6)
        assert {resolve_output_tokens(uniform, recorded, 0, rng) for _ in range(50)} == {5, 6}
        assert user_turns(recorded, "first") == ("u",) and user_turns(recorded, "all") == ("u", "v")


def test_spec_model_defaults_and_forbids_typos() -> None:
    spec = DatasetSpec(path="chat.json")
    assert (spec.format, spec.output_tokens, spec.turns) == ("auto", "dataset", "first")
    assert DatasetSpec.model_validate({"path": "x", "output_tokens": 128}).output_tokens == 128
    with pytest.raises(ValueError, match="extra"):
        DatasetSpec.model_validate({"path": "x", "turn": "all"})


def test_shipped_examples_parse() -> None:
    with open_dataset(EXAMPLES / "chat_sample.sharegpt.json") as data:
        assert data.format == "sharegpt" and len(data) == 30 and data.skipped == 0
        assert sum(len(data.record(i).user_turns) > 1 for i in range(len(data))) >= 25
    with open_dataset(EXAMPLES / "chat_sample.jsonl") as data:
        assert data.format == "jsonl" and len(data) == 20


def test_index_is_streamed_not_read_whole(tmp_path: Path) -> None:
    """A 12 MB file is indexed with a few MB of peak memory (the scan holds a chunk, not the file)."""
    import tracemalloc

    record = conv("q " * 600, "a " * 600)
    path = tmp_path / "big.json"
    with open(path, "w") as handle:
        handle.write("[")
        handle.write(",\n".join(json.dumps(record) for _ in range(5000)))
        handle.write("]")
    assert path.stat().st_size > 12_000_000
    tracemalloc.start()
    try:
        data = open_dataset(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(data) == 5000 and data.record(4999).line == 5000
    assert peak < 6_000_000
    data.close()
