"""The cost model's GEMM phase held against DeepGEMM's published kernel times.

DeepGEMM's README (deepseek-ai/DeepGEMM, tables "Normal GEMMs for dense models" and "Grouped
GEMMs for MoE models (masked layout)", H800 = H100 SXM compute and HBM) gives TFLOPS per FP8
block-scaled GEMM shape; the kernel time is 2·M·N·K / TFLOPS. Put through the model's own
roofline (eff_gemm × FP8 peak, eff_bw × HBM, knee 1.5) the DeepSeek expert shapes
(N 4096 / K 7168 gate-up, N 7168 / K 2048 down) at 64–256 rows per expert come out within
0.86–1.14 of the measurement, 1.06 on average: the published kernels give no evidence for a
grouped-GEMM bandwidth penalty large enough to explain the DeepSeek-R1 row (docs/simulator.md,
"The DeepSeek-R1 rows: what remains"). If someone changes eff_bw, eff_gemm or the knee, this says
whether the expert GEMMs still match the best published Hopper kernel.
"""

from __future__ import annotations

import statistics

import pytest

from attnload.sim.costmodel import EngineConfig, StepBreakdown
from attnload.sim.presets import lookup_hardware

# (groups, rows per group M, N, K, published TFLOPS): DeepGEMM README, H800.
EXPERT_SHAPES = [
    (1, 64, 4096, 7168, 287),
    (1, 64, 7168, 2048, 295),
    (1, 128, 4096, 7168, 533),
    (1, 128, 7168, 2048, 510),
    (4, 256, 4096, 7168, 932),
    (4, 256, 7168, 2048, 815),
]


def _model_kernel_s(groups: int, m: int, n: int, k: int) -> float:
    """The model's GEMM phase for one FP8 grouped GEMM: FLOPs at eff_gemm, FP8 weights at eff_bw."""
    cfg, hw = EngineConfig(gpu="h100"), lookup_hardware("h100")
    c_lin = 2.0 * groups * m * n * k / (hw.fp8_flop_per_s * cfg.eff_gemm)
    m_w = groups * n * k / (hw.hbm_bandwidth_bytes_per_s * cfg.eff_bw)
    return StepBreakdown(c_lin, m_w, 0.0, 0.0, 0.0, 0.0, gemm_knee=cfg.gemm_knee).gemm_phase_s


def _published_s(groups: int, m: int, n: int, k: int, tflops: float) -> float:
    return 2.0 * groups * m * n * k / (tflops * 1e12)


@pytest.mark.parametrize("shape", EXPERT_SHAPES, ids=lambda s: f"g{s[0]}-m{s[1]}-n{s[2]}-k{s[3]}")
def test_expert_gemm_time_matches_deepgemm(shape: tuple[int, int, int, int, int]) -> None:
    groups, m, n, k, tflops = shape
    ratio = _published_s(groups, m, n, k, tflops) / _model_kernel_s(groups, m, n, k)
    assert 0.85 <= ratio <= 1.15, f"published / model = {ratio:.3f}"


def test_mean_expert_gemm_gap_is_small() -> None:
    ratios = [_published_s(*s) / _model_kernel_s(*s[:4]) for s in EXPERT_SHAPES]
    assert statistics.mean(ratios) == pytest.approx(1.06, abs=0.02)
