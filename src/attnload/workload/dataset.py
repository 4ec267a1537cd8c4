"""Dataset prompts: ShareGPT JSON and JSONL files, indexed once, records read lazily, seeded order.

Why an index: a real dataset (ShareGPT V3 is ~650 MB) must not be read whole into every
worker, and a bad record must fail before any load starts. :func:`open_dataset` makes
one streamed pass that validates every record and keeps only its byte span (24 bytes a
record); :class:`DatasetSampler` then shuffles the record numbers per epoch with the run's
seed and reads each record by seeking to it, so each record is used once before any repeats
and two runs with one seed send the same records in the same order.

Record shapes (one :class:`DatasetRecord` each):

- ShareGPT: ``{"conversations": [{"from": "human"|"gpt", "value": "..."}, ...]}`` in a top-level
  array. ``system`` turns become the system prompt; other speakers (``chatgpt``, ``bard``,
  ``bing``) count as the assistant. A record with no human text is skipped (the public
  file has some), and counted in ``Dataset.skipped``.
- JSONL, one object a line: ``{"prompt": "..."}`` or a chat ``messages`` list of ``{"role", "content"}``
  (or a ShareGPT ``conversations`` list), with an optional ``max_tokens``.
"""

from __future__ import annotations

import os
import random
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from attnload.apis.base import MESSAGES
from attnload.config.model import DatasetSpec as DatasetSpec  # re-exported: the dataset key's model
from attnload.config.model import Distribution, sample_count
from attnload.errors import UsageError
from attnload.measure.tokens import text_tokens
from attnload.workload.jsonscan import Span, iter_array_elements, iter_json_lines, read_span

DatasetFormat = Literal["sharegpt", "jsonl"]
_USER_SPEAKERS = frozenset({"human", "user"})
"""The user's names as a turn's speaker (a message's ``role``, a ShareGPT turn's ``from``), lower-cased."""
_SYSTEM_SPEAKERS = frozenset({"system"})
"""The system prompt's speaker; any other speaker is the assistant."""
_SNIFF_BYTES = 1 << 16


@dataclass(frozen=True)
class DatasetRecord:
    """One usable record: its user turns and the replies recorded after them.

    ``assistant_replies[i]`` answered ``user_turns[i]``; the tuple may be one shorter (a
    record ending on a human turn). ``reply_tokens`` are the replies' lengths by the
    project's estimator, which ``output_tokens: "dataset"`` sends as ``max_tokens``.
    """

    index: int
    line: int
    user_turns: tuple[str, ...]
    assistant_replies: tuple[str, ...] = ()
    system: str | None = None
    max_tokens: int | None = None
    reply_tokens: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reply_tokens", tuple(text_tokens(reply) for reply in self.assistant_replies))


class Dataset:
    """A validated dataset file: record count, byte spans, and lazy reads by record number."""

    def __init__(self, path: Path, fmt: DatasetFormat) -> None:
        self.path = path
        self.format: DatasetFormat = fmt
        self.skipped = 0
        self._starts = array("q")
        self._lengths = array("q")
        self._lines = array("q")
        self._handle: IO[bytes] | None = None
        self._scan()

    def __len__(self) -> int:
        return len(self._starts)

    def record(self, number: int) -> DatasetRecord:
        """Read record ``number`` (0-based, among usable records) from disk."""
        if self._handle is None:
            self._handle = open(self.path, "rb")  # held for the dataset's life; close() closes it
        span = Span(self._starts[number], self._lengths[number], self._lines[number])
        record = self._convert(read_span(self._handle, span), span.line, number)
        if record is None:
            raise UsageError(
                f"dataset {self.path} line {span.line}: the record changed since it was checked; "
                "do not edit the file during a run"
            )
        return record

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> Dataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _elements(self) -> Iterator[tuple[Span, Any]]:
        if self.format == "sharegpt":
            return iter_array_elements(self.path, "dataset")
        return iter_json_lines(self.path, "dataset")

    def _convert(self, value: Any, line: int, number: int) -> DatasetRecord | None:
        where = f"dataset {self.path} line {line}"
        if self.format == "sharegpt":
            return record_from_sharegpt(value, where, number, line)
        return record_from_jsonl(value, where, number, line)

    def _scan(self) -> None:
        for span, value in self._elements():
            if self._convert(value, span.line, len(self._starts)) is None:
                self.skipped += 1
                continue
            self._starts.append(span.start)
            self._lengths.append(span.length)
            self._lines.append(span.line)
        if not self._starts:
            found = f" ({self.skipped} records without human text)" if self.skipped else ""
            raise UsageError(
                f"dataset {self.path}: no usable record{found}; each record needs at least one non-empty user message"
            )


def open_dataset(path: str | os.PathLike[str], fmt: Literal["sharegpt", "jsonl", "auto"] = "auto") -> Dataset:
    """Check and index a dataset file in one streamed pass, before any load starts."""
    file = Path(path).expanduser()
    if not file.exists():
        raise UsageError(f"dataset {file}: no such file; give the local path of a ShareGPT .json or a .jsonl file")
    if not file.is_file():
        raise UsageError(f"dataset {file}: not a regular file; give the path of a .json or .jsonl file")
    resolved = detect_format(file) if fmt == "auto" else fmt
    return Dataset(file, resolved)


def detect_format(path: Path) -> DatasetFormat:
    """``[`` first means a ShareGPT array, ``{`` a JSONL file; anything else is refused."""
    with open(path, "rb") as handle:
        head = handle.read(_SNIFF_BYTES).lstrip(b"\xef\xbb\xbf \t\r\n")
        while not head:
            chunk = handle.read(_SNIFF_BYTES)
            if not chunk:
                raise UsageError(f"dataset {path}: the file is empty; give a file with at least one record")
            head = chunk.lstrip(b" \t\r\n")
    if head[:1] == b"[":
        return "sharegpt"
    if head[:1] == b"{":
        return "jsonl"
    raise UsageError(
        f"dataset {path} line 1: neither a JSON array (ShareGPT) nor JSON lines; set dataset.format or fix the file"
    )


def record_from_sharegpt(value: Any, where: str, number: int = 0, line: int = 0) -> DatasetRecord | None:
    """A ShareGPT object as a record; None when it has no human text (skipped, as the public file needs)."""
    if not isinstance(value, Mapping):
        raise UsageError(
            f'{where}: a ShareGPT record must be an object with "conversations"; found {type(value).__name__}'
        )
    turns = value.get("conversations")
    if not isinstance(turns, list):
        raise UsageError(
            f'{where}: a ShareGPT record needs a "conversations" list of {{"from": ..., "value": ...}} turns'
        )
    pairs: list[tuple[str, str]] = []
    for position, turn in enumerate(turns):
        if not isinstance(turn, Mapping) or not isinstance(turn.get("value"), str):
            raise UsageError(
                f'{where}: conversations[{position}] needs a string "value" (and "from": "human" or "gpt")'
            )
        pairs.append((str(turn.get("from", "")).lower(), turn["value"]))
    return _record(pairs, number, line, None)


def record_from_jsonl(value: Any, where: str, number: int = 0, line: int = 0) -> DatasetRecord:
    """A JSONL object (``prompt``, ``messages`` or ``conversations``, optional ``max_tokens``) as a record."""
    if not isinstance(value, Mapping):
        raise UsageError(
            f'{where}: each line must be a JSON object with "prompt" or "{MESSAGES}"; found {type(value).__name__}'
        )
    max_tokens = value.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise UsageError(f"{where}: max_tokens must be a positive integer, not {max_tokens!r}")
    if isinstance(value.get("prompt"), str):
        pairs = [("user", value["prompt"])]
    elif isinstance(value.get(MESSAGES), list):
        pairs = _message_pairs(value[MESSAGES], where)
    elif "conversations" in value:
        record = record_from_sharegpt(value, where, number, line)
        if record is None:
            raise UsageError(f"{where}: the conversation has no human text; remove the line")
        return DatasetRecord(number, line, record.user_turns, record.assistant_replies, record.system, max_tokens)
    else:
        raise UsageError(
            f'{where}: needs "prompt" (a string) or "{MESSAGES}" (a list of '
            '{"role", "content"}); found keys ' + ", ".join(sorted(map(str, value)))
        )
    record = _record(pairs, number, line, max_tokens)
    if record is None:
        raise UsageError(f"{where}: no non-empty user message; give the prompt text or remove the line")
    return record


def _message_pairs(messages: list[Any], where: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for position, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), str):
            raise UsageError(
                f'{where}: messages[{position}] needs a string "content" (and "role": "user", "assistant" or "system")'
            )
        pairs.append((str(message.get("role", "")).lower(), message["content"]))
    return pairs


def _record(pairs: list[tuple[str, str]], number: int, line: int, max_tokens: int | None) -> DatasetRecord | None:
    """Alternate user/assistant turns: consecutive turns of one side merge; leading replies drop."""
    system = "\n\n".join(text for speaker, text in pairs if speaker in _SYSTEM_SPEAKERS) or None
    users: list[str] = []
    replies: list[str] = []
    last_from_user: bool | None = None
    for speaker, text in pairs:
        if speaker in _SYSTEM_SPEAKERS:
            continue
        from_user = speaker in _USER_SPEAKERS  # anyone else (assistant, gpt, ...) replies
        if not from_user and not users:
            continue
        target = users if from_user else replies
        if from_user == last_from_user:
            target[-1] = target[-1] + "\n\n" + text
        else:
            target.append(text)
        last_from_user = from_user
    if not users or not users[0].strip():
        return None
    return DatasetRecord(number, line, tuple(users), tuple(replies), system, max_tokens)


def user_turns(record: DatasetRecord, turns: Literal["first", "all"]) -> tuple[str, ...]:
    """The user messages a record contributes: its first only, or all of them as one conversation."""
    return record.user_turns if turns == "all" else record.user_turns[:1]


def resolve_output_tokens(
    spec: Literal["dataset"] | int | Distribution, record: DatasetRecord, turn: int, rng: random.Random
) -> int | None:
    """``max_tokens`` for ``record``'s turn ``turn`` (0-based); None leaves the caller's default.

    ``dataset`` sends the record's ``max_tokens`` if it has one, else the recorded reply's
    estimated length (at least 1); a record without a reply for that turn gets None.
    """
    if spec == "dataset":
        if record.max_tokens is not None:
            return record.max_tokens
        if turn < len(record.reply_tokens):
            return max(1, record.reply_tokens[turn])
        return None
    assert not isinstance(spec, str)
    return sample_count(spec, rng)


class DatasetSampler:
    """Records in a seeded order: a fresh shuffle per epoch, each record once before any repeats.

    Workers share one global order: the sequence of epoch permutations, of which worker
    ``shard`` of ``shards`` takes positions ``shard, shard + shards, ...``; so a fleet
    uses every record before any repeats whatever its size, and each worker reads only
    the records it sends.
    """

    def __init__(self, dataset: Dataset, seed: int, shard: int = 0, shards: int = 1) -> None:
        if shards < 1 or not 0 <= shard < shards:
            raise ValueError(f"shard {shard} of {shards}: need 0 <= shard < shards")
        self.dataset = dataset
        self.seed = seed
        self._shards = shards
        self._position = shard
        self._epoch = -1
        self._order: list[int] = []

    @property
    def epoch(self) -> int:
        """The epoch of the record most recently returned (0 until the first repeat)."""
        return max(0, self._epoch)

    def order(self, epoch: int) -> list[int]:
        """Record numbers of one epoch, shuffled by (seed, epoch): the same on every worker."""
        numbers = list(range(len(self.dataset)))
        random.Random(f"attnload.dataset:{self.seed}:{epoch}").shuffle(numbers)
        return numbers

    def next_number(self) -> int:
        size = len(self.dataset)
        epoch, index = divmod(self._position, size)
        if epoch != self._epoch:
            self._epoch, self._order = epoch, self.order(epoch)
        self._position += self._shards
        return self._order[index]

    def next(self) -> DatasetRecord:
        return self.dataset.record(self.next_number())
