"""Every attnload series name, spelled once, whole, so grep finds it (dashboards import them).

The per-request histograms are spelled in their table, ``measure.metrics`` (each with the rest of
its metric); the names a reader here needs by name are taken from it.
"""

from __future__ import annotations

from attnload.measure.metrics import prometheus_name

LABELS = ("model", "attention", "profile", "target")
"""``target`` is the config's model key: two entries with one model id (one model on vLLM and on
SGLang, per-model ``base_url``) stay two series instead of merging."""
BUCKETS_S = tuple(round(0.001 * 1.25**i, 6) for i in range(53)) + (120.0,)  # 1 ms … 120 s, log-spaced

TTFT_SECONDS = prometheus_name("ttft")
ITL_SECONDS = prometheus_name("itl")
DISPATCH_LAG_SECONDS = prometheus_name("lag")
REQUESTS = "attnload_requests"  # exposed as attnload_requests_total
REQUEST_ERRORS = "attnload_request_errors"
PROMPT_TOKENS = "attnload_prompt_tokens"
COMPLETION_TOKENS = "attnload_completion_tokens"
CACHED_PROMPT_TOKENS = "attnload_cached_prompt_tokens"
REASONING_TOKENS = "attnload_reasoning_tokens"  # exposed as attnload_reasoning_tokens_total
GOODPUT_REQUESTS = "attnload_goodput_requests"
USERS = "attnload_users"
TARGET_USERS = "attnload_target_users"
TARGET_RATE = "attnload_target_rate"
STAGE = "attnload_stage"
STAGE_INFO = "attnload_stage_info"
WORKERS = "attnload_workers"
WORKER_CPU_RATIO = "attnload_worker_cpu_ratio"
WORKER_LOOP_LAG_SECONDS = "attnload_worker_loop_lag_seconds"
CLIENT_SATURATED = "attnload_client_saturated"
DECODE_SLOPE = "attnload_decode_slope_ms_per_ktok"
"""Per model and stage: ms the decode step grows per 1K tokens of context, so far (docs/microscope.md)."""
PREFILL_STALL = "attnload_prefill_stall_ms_per_ktok"
"""Per model, ``--shape interference:L``: ms a decode stream lost per injected prefill, per 1K prompt tokens."""
SIM_PREFIX = "attnload_sim_"
"""The simulator's own series (``attnload_sim_*``) are named by the simulator, which imports nothing of this."""
GPU_LABELS = ("model", "attention", "target")
"""The master's ``attnload_gpu_*`` series: per model, whatever labels dcgm-exporter used (docs/gpu-metrics.md)."""
GPU_DRAM_ACTIVE = "attnload_gpu_dram_active"
GPU_TENSOR_ACTIVE = "attnload_gpu_tensor_active"
GPU_POWER_WATTS = "attnload_gpu_power_watts"
GPU_ENERGY_JOULES = "attnload_gpu_energy_joules"  # exposed as attnload_gpu_energy_joules_total
GPU_COUNT = "attnload_gpu_count"
