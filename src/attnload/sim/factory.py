"""From model ids and settings to ready engines: what ``attnload sim`` and ``attnload demo`` share.

Resolution order for each requested id: a sim-config entry with that id (its preset or
attention type, plus overrides), else a preset key or alias (case-insensitive, with or
without ``org/``), else :class:`~attnload.sim.presets.UnknownModel`. Models are served
under the id as requested (``deepseek-chat`` stays ``deepseek-chat``); the preset key and
its aliases go into ``ServedModel.aliases`` so the server routes them to the same engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from attnload.errors import UsageError
from attnload.sim.api import Engine, ServedModel
from attnload.sim.costmodel import Deployment, EngineConfig, deploy, deployment_details
from attnload.sim.decode.speculation import Speculator
from attnload.sim.engine import Clock, RooflineEngine
from attnload.sim.presets import DEFAULT_MODELS, ModelPreset, aliases_of, lookup_preset
from attnload.sim.simconfig import SimConfigFile


@dataclass(frozen=True)
class ModelSpec:
    """A served id with its (possibly overridden) preset and engine config."""

    id: str
    preset: ModelPreset
    cfg: EngineConfig


def resolve_models(
    model_ids: Sequence[str] | None, base: EngineConfig, sim_config: SimConfigFile | None = None
) -> list[ModelSpec]:
    """Ids to serve: ``model_ids``, else the config file's entries, else the default pair (§4.6)."""
    if model_ids is None:
        model_ids = [e.id for e in sim_config.models] if sim_config is not None else list(DEFAULT_MODELS)
    specs: list[ModelSpec] = []
    seen: set[str] = set()
    for model_id in model_ids:
        model_id = model_id.strip()
        if not model_id:
            raise UsageError("empty model id in --models; give a comma-separated list such as llama-3-70b,deepseek-v3")
        if model_id.lower() in seen:
            raise UsageError(f"model {model_id!r} is listed twice")
        seen.add(model_id.lower())
        entry = sim_config.entry(model_id) if sim_config is not None else None
        if entry is not None:
            preset, cfg = entry.resolve(base)
        else:
            preset, cfg = lookup_preset(model_id), base
        specs.append(ModelSpec(model_id, preset, cfg))
    return specs


def served_model(spec: ModelSpec, dep: Deployment | None = None) -> ServedModel:
    """The client-facing identity: requested id, attention type, preset, capacity facts and aliases."""
    if dep is None:
        dep = deploy(spec.preset, spec.cfg, require_fit=False)
    return ServedModel(
        id=spec.id,
        attention=spec.preset.attention,
        preset=spec.preset.key,
        max_model_len=spec.preset.max_model_len,
        details=deployment_details(dep),
        aliases=(spec.preset.key, *aliases_of(spec.preset.key)),
    )


def build_engines(
    specs: Sequence[ModelSpec],
    *,
    mode: Literal["roofline", "fixed"] = "roofline",
    ttft_s: float = 0.2,
    itl_s: float = 0.02,
    jitter: float = 0.0,
    max_waiting: int | None = None,
    clock: Clock | None = None,
) -> list[Engine]:
    """One engine per spec. Roofline refuses (``UsageError``) a model that does not fit (§3.4);
    fixed mode has no capacity model, so it serves any resolvable model."""
    engines: list[Engine] = []
    for spec in specs:
        if mode == "fixed":
            from attnload.sim.fixed import FixedEngine

            seed, k = spec.cfg.seed, spec.cfg.spec_tokens
            speculator = Speculator(k, spec.cfg.spec_acceptance, seed) if k else None
            engines.append(
                FixedEngine(
                    served_model(spec), ttft_s=ttft_s, itl_s=itl_s, jitter=jitter, seed=seed, speculator=speculator
                )
            )
            continue
        dep = deploy(spec.preset, spec.cfg)
        engines.append(RooflineEngine(served_model(spec, dep), dep, clock=clock, max_waiting=max_waiting))
    return engines
