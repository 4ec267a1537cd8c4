"""``attnload run --seed-script``: the seed's section-4 latency script, done right.

The seed times one non-streaming request per (model, prompt) and prints, per model::

    --- gqa_model (llama-3-70b) ---
    short: {'model': 'llama-3-70b', 'elapsed_sec': 1.234, 'completion_tokens': 98, 'tokens_per_sec': 79.4}

This prints the same lines, so existing notes and spreadsheets keep working, but each
figure is the **median over ``benchmark.repeat``** requests (the seed's advice, which
its own script skips), requests go one at a time through attnload's client (unique
salt, temperature from the config) and the raw samples are written to
``RESULTS/seed_latency.json``.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from attnload.client.chat import ApiClient, chat_body
from attnload.client.reach import check_reachable
from attnload.client.transport import Timeouts
from attnload.config.load import load_config
from attnload.config.model import TestConfig
from attnload.errors import UsageError
from attnload.workload.prompts import Workload

SEED_PROFILES = ("short", "long")


def seed_profiles(config: TestConfig, selected: str = "") -> list[str]:
    """The seed's ``short`` and ``long`` when present, else every profile (or the ``--profile`` list)."""
    if selected:
        names = [name.strip() for name in selected.split(",") if name.strip()]
        for name in names:
            config.profile(name)
        return names
    names = [p.name for p in config.profiles]
    seed = [name for name in SEED_PROFILES if name in names]
    return seed or names


def measure(config: TestConfig, profiles: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{model key: {profile: {model, elapsed_sec, completion_tokens, tokens_per_sec, samples}}}``."""
    request = config.request
    timeouts = Timeouts(
        connect_s=request.connect_timeout_s,
        ttft_s=request.ttft_timeout_s,
        idle_s=request.idle_timeout_s,
        total_s=request.total_timeout_s,
    )
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for target in config.models:
        client = ApiClient(target.url, target.api_key(), timeouts)
        out[target.key] = {}
        try:
            for name in profiles:
                workload = Workload(config, [name])
                samples = []
                for _ in range(config.repeat):
                    plan = workload.next()
                    # Non-streaming, as the seed measures: elapsed is the whole request.
                    body = chat_body(
                        target.id,
                        plan.messages,
                        max_tokens=plan.max_tokens,
                        temperature=request.temperature,
                        stream=False,
                        ignore_eos=plan.ignore_eos,
                    )
                    record = client.send(body, model_key=target.key, profile=name, stage=0)
                    if record.outcome != "ok":
                        raise UsageError(
                            f"model {target.key}, prompt {name}: request failed ({record.error}); "
                            "run `attnload check -c FILE` for the fix"
                        )
                    samples.append((record.e2e_s, record.completion_tokens))
                out[target.key][name] = _row(target.id, samples)
        finally:
            client.close()
    return out


def _row(model_id: str, samples: list[tuple[float, int]]) -> dict[str, Any]:
    elapsed = statistics.median(s[0] for s in samples)
    tokens = statistics.median(s[1] for s in samples)
    rates = statistics.median(s[1] / s[0] for s in samples if s[0] > 0)
    return {
        "model": model_id,
        "elapsed_sec": round(elapsed, 3),
        "completion_tokens": int(tokens) if float(tokens).is_integer() else tokens,
        "tokens_per_sec": round(rates, 2),
        "samples": [{"elapsed_sec": round(e, 4), "completion_tokens": n} for e, n in samples],
    }


def format_lines(config: TestConfig, table: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The seed's printout: a header per model, then ``NAME: {dict}`` per prompt."""
    lines = []
    for target in config.models:
        lines.append(f"--- {target.key} ({target.id}) ---")
        for name, row in table[target.key].items():
            shown = {k: row[k] for k in ("model", "elapsed_sec", "completion_tokens", "tokens_per_sec")}
            lines.append(f"{name}: {shown}")
    return lines


def run_seed_script(config_path: Path, *, profiles: str = "", results_dir: Path | None = None) -> int:
    config = load_config(config_path)
    names = seed_profiles(config, profiles)
    check_reachable(config)
    table = measure(config, names)
    for line in format_lines(config, table):
        print(line)
    if results_dir is not None:
        results_dir.mkdir(parents=True, exist_ok=True)
        path = results_dir / "seed_latency.json"
        path.write_text(
            json.dumps(
                {
                    "schema": "attnload.seed_latency/v1",
                    "repeat": config.repeat,
                    "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "models": table,
                },
                ensure_ascii=False,
                indent=2,
            ),
            encoding="utf-8",
        )
        print(f"medians over {config.repeat} requests each; samples: {path}")
    return 0
