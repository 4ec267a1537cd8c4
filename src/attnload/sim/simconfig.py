"""The simulator's per-model config file (``attnload sim --config FILE``): JSON, TOML or YAML.

Shape (any of the three formats)::

    models:
      - {id: deepseek-chat}                          # an alias: served with the deepseek-v3 preset
      - {id: my-mla-model, attention_type: MLA}      # unknown id: generic-mla (docs/cost-model.md §1)
      - {id: ds-v3-tp-only, preset: deepseek-v3, dp_attention: 1, kv_capacity_scale: 0.05}

Each entry names a ``preset`` or an ``attention_type`` (or is itself a preset key or alias)
and may override any engine field (``gpu``, ``tp``, ``dp_attention``, ...; §2/§4.6) or
preset field (``layers``, ``h_kv``, ``params_total``, ...). The file is validated once,
at load, into frozen models that forbid unknown keys: a misspelled field must fail, not
vanish. Problems become one-line :class:`UsageError` naming the file and, where the
parser gives one, the line.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import typing
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from attnload.attention import ATTENTION_TYPES
from attnload.errors import UsageError, validated
from attnload.sim.costmodel import EngineConfig
from attnload.sim.presets import ModelPreset, generic_preset, lookup_preset

_PRESET_FIXED = ("key", "attention", "synthetic")  # identity, not tunable


def _optional_fields(cls: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {
        f.name: (Optional[hints[f.name]], None)  # noqa: UP045 - create_model needs a runtime type
        for f in dataclasses.fields(cls)
        if f.name not in skip and not f.name.startswith("_")
    }


ENGINE_FIELDS = tuple(f.name for f in dataclasses.fields(EngineConfig))
PRESET_FIELDS = tuple(f.name for f in dataclasses.fields(ModelPreset) if f.name not in _PRESET_FIXED)


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


_EntryBase = create_model(
    "_EntryBase", __base__=_Strict, **_optional_fields(EngineConfig), **_optional_fields(ModelPreset, _PRESET_FIXED)
)


class SimModelEntry(_EntryBase):
    """One served model: its id as clients send it, how to simulate it, and overrides."""

    id: str = Field(min_length=1)
    preset: Optional[str] = None  # noqa: UP045
    attention_type: Optional[str] = None  # noqa: UP045

    @field_validator("attention_type")
    @classmethod
    def _known_attention(cls, value: str | None) -> str | None:
        if value is None:
            return None
        text = value.strip().upper()
        if text not in ATTENTION_TYPES:
            raise ValueError(f"unknown attention type {value!r}; valid: {', '.join(ATTENTION_TYPES)}")
        return text

    def resolve(self, base: EngineConfig) -> tuple[ModelPreset, EngineConfig]:
        """The preset (with field overrides) and engine config (base + overrides) of this entry."""
        if self.preset is not None:
            preset = lookup_preset(self.preset)
            if self.attention_type is not None and self.attention_type != preset.attention:
                raise UsageError(
                    f"model {self.id!r}: preset {preset.key} is {preset.attention}, "
                    f"not attention_type {self.attention_type}; drop one of them"
                )
        elif self.attention_type is not None:
            preset = generic_preset(self.attention_type)
        else:
            preset = lookup_preset(self.id)
        preset_changes = {k: getattr(self, k) for k in PRESET_FIELDS if getattr(self, k) is not None}
        if preset_changes:
            preset = dataclasses.replace(preset, synthetic=True, **preset_changes)
        engine_changes = {k: getattr(self, k) for k in ENGINE_FIELDS if getattr(self, k) is not None}
        return preset, dataclasses.replace(base, **engine_changes)


class SimConfigFile(_Strict):
    """The whole file: a list of model entries."""

    models: list[SimModelEntry] = Field(min_length=1)

    def entry(self, model_id: str) -> SimModelEntry | None:
        """The entry whose id equals ``model_id`` (case-insensitive), if any."""
        wanted = model_id.strip().lower()
        return next((e for e in self.models if e.id.strip().lower() == wanted), None)


def load_sim_config(path: str | Path) -> SimConfigFile:
    """Read and validate a sim config file; every problem is a one-line ``UsageError``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read sim config ({exc.strerror or exc})") from None
    raw = _parse(path, text)
    if isinstance(raw, list):
        raw = {"models": raw}
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: expected a mapping with `models: [...]` (or a list of model entries)")
    return validated(SimConfigFile, raw, path)


def _parse(path: Path, text: str) -> Any:
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            return json.loads(text)
        if suffix == ".toml":
            return tomllib.loads(text)
        if suffix in (".yaml", ".yml"):
            return yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: invalid TOML: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{path}{line}: invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    raise UsageError(f"{path}: unknown sim config format {suffix!r}; use .json, .toml, .yaml or .yml")
