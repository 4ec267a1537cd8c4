"""The overview dashboard's "GPU view" row: DRAM and tensor activity, power, joules per output token.

dcgm-exporter labels its series by node, GPU index and (with pod mapping) pod, never by
model or attention type, and the simulator's labels are not a real exporter's. So the
panels read the master's ``attnload_gpu_*`` series instead: the master knows each model's
GPUs (``gpu_selector``) and re-exports them with the ``model``/``attention``/``target``
labels of every other attnload series (``metrics/gpu.py``). One query per panel then works
against the simulator and a real fleet alike, needs no recording rule or ``label_replace``
on pod names, and joins the client's token counter for joules per token by those labels.
Colours are the attention types' (GQA blue, MLA orange), as in every other row.
"""

from __future__ import annotations

from attnload.dashboards.panels import RATE, SCOPE, SEL, SPLIT, Panel, Target, row
from attnload.exporter import names

SEL_GPU = f'model=~"$model", attention=~"$attention", target=~"$target", {SCOPE}'
"""``attnload_gpu_*`` are per model, not per profile (the GPUs serve every profile at once)."""
JOULES_PER_TOKEN = "suffix: J/token"
GPU_NOTE = (
    "From dcgm-exporter (DCGM_FI_PROF_* profiling fields, power, energy), read by the master per model "
    "through its gpu_selector and re-exported as attnload_gpu_*. Against attnload's simulator the "
    "values come from its roofline (docs/simulator.md), not from a GPU."
)


def gpu_view() -> tuple[Panel, ...]:
    """DRAM active, tensor active, power and joules per output token, per model and attention type."""
    energy = f"sum by ({SPLIT}) (rate({names.GPU_ENERGY_JOULES}_total{{{SEL_GPU}}}[{RATE}]))"
    tokens = f"sum by ({SPLIT}) (rate({names.COMPLETION_TOKENS}_total{{{SEL}}}[{RATE}]))"
    return (
        row("GPU view (DCGM: DRAM vs tensor, power, energy per token)"),
        Panel(
            "GPU: DRAM active",
            "percentunit",
            (Target(f"max by ({SPLIT}) ({names.GPU_DRAM_ACTIVE}{{{SEL_GPU}}})"),),
            "Share of cycles the HBM interface moved data, mean over the model's GPUs. High DRAM with low "
            "tensor activity is bandwidth-bound decode (GQA streaming its KV cache). " + GPU_NOTE,
            max_value=1.0,
        ),
        Panel(
            "GPU: tensor pipes active",
            "percentunit",
            (Target(f"max by ({SPLIT}) ({names.GPU_TENSOR_ACTIVE}{{{SEL_GPU}}})"),),
            "Share of cycles the tensor (HMMA) pipes were busy, mean over the model's GPUs: prefill and MLA's "
            "absorbed attention raise it. " + GPU_NOTE,
            max_value=1.0,
        ),
        Panel(
            "GPU: power",
            "watt",
            (Target(f"sum by ({SPLIT}) ({names.GPU_POWER_WATTS}{{{SEL_GPU}}})"),),
            "Power summed over the model's GPUs. " + GPU_NOTE,
        ),
        Panel(
            "GPU: joules per output token",
            JOULES_PER_TOKEN,
            (Target(f"{energy} / {tokens}"),),
            "Energy of the model's GPUs per completion token the client received (energy counter rate over "
            "token rate). " + GPU_NOTE,
            decimals=3,
        ),
    )
