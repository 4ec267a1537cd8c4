"""Attention types: the facts every side reads (config, simulator, reports).

Adding an attention type means its name here plus its presets (dimensions, KV layout)
in ``sim/presets.py``; the KV bytes/token arithmetic on those presets is the simulator's
cost model (``sim/costmodel.py``). The load generator never imports the simulator: a run
that wants preset facts next to its measurements is handed a :data:`FactsLookup`
by its entry point (``commands/locustfile.py``).
"""

from __future__ import annotations

from collections.abc import Callable

ATTENTION_TYPES = ("GQA", "MLA", "GTA", "GLA", "MHA", "MQA")
"""Grouped-query, multi-head latent, grouped-tied, grouped latent, multi-head and multi-query attention."""

FactsLookup = Callable[[str], "dict[str, object] | None"]
"""Model id -> KV and capacity facts (preset, KV bytes/token/GPU, capacity, ...) or None when unknown."""


def no_facts(model_id: str) -> dict[str, object] | None:
    """The lookup of a run whose entry point knows no presets: measurements only."""
    return None


def parse_attention(value: object) -> str:
    """The canonical (upper-case) attention type; an unknown one is a ``ValueError`` listing the valid ones."""
    text = str(value).strip().upper()
    if text not in ATTENTION_TYPES:
        raise ValueError(f"unknown attention type {value!r}; valid: {', '.join(ATTENTION_TYPES)}")
    return text
