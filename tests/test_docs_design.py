"""docs/design.md, the contract, states each public name once and names every one the code has.

- No merge debris: two lines of 60 characters or more never share their first 80 characters (a
  command row, a paragraph or a results addition written twice, each copy a little different).
- Complete: every command's flags, every shape kind, API, error class, Prometheus series, config key
  and results field that the code defines is on the page (a name the page lacks is a public interface
  nobody wrote down).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

import pytest
from pydantic import BaseModel

from attnload.apis import APIS
from attnload.commands.cli import SUBCOMMANDS, build_parser
from attnload.config import model as config_model
from attnload.errors import ErrorClass
from attnload.exporter import names
from attnload.measure.metrics import METRICS
from attnload.results import model as results_model
from attnload.workload.shapes import SHAPE_KINDS

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"
TEXT = DESIGN.read_text(encoding="utf-8")
LONG_LINE = 60
"""Lines shorter than this (table rules, list stubs, short headings) may repeat."""
PREFIX = 80


def duplicate_lines(text: str) -> dict[str, list[int]]:
    """Lines of at least :data:`LONG_LINE` characters that share their first :data:`PREFIX`, by that prefix."""
    seen: dict[str, list[int]] = defaultdict(list)
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if len(stripped) >= LONG_LINE:
            seen[stripped[:PREFIX]].append(number)
    return {prefix: lines for prefix, lines in seen.items() if len(lines) > 1}


def test_the_rule_finds_a_row_written_twice() -> None:
    row = "| `attnload run -c FILE [--users N]` | the load test, with a long description of what it does |"
    assert list(duplicate_lines(f"{row}\nshort\n{row[:-3]} and more |\n").values()) == [[1, 3]]
    assert duplicate_lines(f"{row}\n| --- | --- |\n| --- | --- |\n") == {}


def test_no_line_of_the_contract_is_written_twice() -> None:
    found = duplicate_lines(TEXT)
    assert found == {}, "docs/design.md states these twice (keep one, in its section):\n" + "\n".join(
        f"lines {lines}: {prefix}" for prefix, lines in found.items()
    )


def _documented(flag: str) -> bool:
    """``--flag`` appears as itself, or as ``--[no-]flag`` / ``--no-flag`` for an on/off pair."""
    bare = flag.removeprefix("--no-").removeprefix("--")
    return bool(re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", TEXT)) or f"--[no-]{bare}" in TEXT


def _long_flags(parser: argparse.ArgumentParser, where: str) -> list[tuple[str, str]]:
    flags = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                flags += _long_flags(sub, f"{where} {name}")
        else:
            flags += [(where, s) for s in action.option_strings if s.startswith("--") and s != "--help"]
    return flags


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_every_flag_of_every_command_is_documented(command: str) -> None:
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    assert f"attnload {command}" in TEXT
    missing = [f"{where} {flag}" for where, flag in _long_flags(sub, f"attnload {command}") if not _documented(flag)]
    assert missing == []


def test_every_shape_api_and_error_class_is_documented() -> None:
    words = [f"`{kind}" for kind in SHAPE_KINDS] + [f"`{api}`" for api in APIS] + [f"`{e.label}`" for e in ErrorClass]
    assert [w for w in words if w not in TEXT] == []


def test_every_prometheus_series_is_documented() -> None:
    series = [m.prometheus for m in METRICS if m.prometheus]
    series += [v for k, v in vars(names).items() if k.isupper() and isinstance(v, str) and v.startswith("attnload_")]
    series = [s for s in series if s != names.SIM_PREFIX]
    assert [s for s in series if not re.search(rf"`{re.escape(s)}(_total)?[`{{ ]", TEXT)] == []


def _fields(*models: type[BaseModel]) -> set[str]:
    return {info.alias or name for m in models for name, info in m.model_fields.items()}


INTERNAL_MODEL_FIELDS = {"key", "url", "url_note", "attention", "max_context"}
"""``ModelTarget`` fields the loader derives (the config spells them ``models.KEY``, ``attention_type`` or
``attention``, ``max_context`` or ``context_window``; the URL from ``base_url``)."""


def test_every_config_key_is_documented() -> None:
    keys = _fields(
        config_model.ProfileSpec,
        config_model.RequestSettings,
        config_model.Slo,
        config_model.ConversationSpec,
        config_model.DatasetSpec,
        config_model.AgentSpec,
        config_model.Price,
    )
    keys |= _fields(config_model.ModelTarget) - INTERNAL_MODEL_FIELDS
    assert sorted(k for k in keys if f"`{k}`" not in TEXT and not re.search(rf"[`{{ ]{k}[`}},]", TEXT)) == []


def test_every_results_field_is_documented() -> None:
    models = [v for v in vars(results_model).values() if isinstance(v, type) and issubclass(v, BaseModel)]
    fields = {f for f in _fields(*(m for m in models if m.__module__ == results_model.__name__))}
    assert sorted(f for f in fields if not re.search(rf"(?<!\w){re.escape(f)}(?!\w)", TEXT)) == []
