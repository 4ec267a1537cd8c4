"""Issue 26, unit level: dcgm-exporter bodies -> per-model GPU windows -> ``stages[].gpu``.

The bodies in tests/data/dcgm/ follow dcgm-exporter's documented format (four H100s on one
node, two pods, a counter reset, the stock list without SM_ACTIVE, one without the energy
counter); every expected number below is computed by hand from those files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnload.errors import UsageError
from attnload.scrape import ServerMetricsError
from attnload.scrape.dcgm import GpuExposition, parse_dcgm
from attnload.scrape.gpu import GPU, GpuTarget
from attnload.scrape.gpuwindow import GpuSample, GpuWindow, classify_bound
from attnload.scrape.poller import ScrapePoller
from attnload.scrape.summary import GpuSummary
from helpers import ROOT

DATA = ROOT / "tests" / "data" / "dcgm"
LLAMA = (("pod", "llama-70b-.*"),)
DEEPSEEK = (("namespace", "vllm"), ("pod", "deepseek-v3-.*"))


def _read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def _sample(name: str, selector: tuple[tuple[str, str], ...], at_s: float) -> GpuSample:
    exposition = parse_dcgm(_read(name))
    return GpuSample(exposition.source, at_s, tuple(exposition.select(dict(selector))))


def test_parse_reads_units_and_labels() -> None:
    exposition = parse_dcgm(_read("h100x4_two_pods_t0.prom"))
    assert exposition.source == "dcgm" and len(exposition.readings) == 4
    first = exposition.readings[0]
    assert first.uid == "GPU-3f9a1c2e-7b41-4d0e-9c55-1a2b3c4d5e01"
    assert first.labels["pod"] == "llama-70b-7d9f8-abcde" and first.labels["Hostname"] == "gpu-node-a"
    assert first.values["dram_active"] == 0.781522 and first.values["tensor_active"] == 0.121043
    assert first.values["gpu_util"] == pytest.approx(1.0)  # DCGM's 100 % -> a fraction
    assert first.values["energy_mj"] == 88412345678 and first.values["fb_used_mib"] == 73545
    assert "sm_active" not in first.values  # not in the stock counter list: absent, not 0


def test_selectors_pick_each_models_gpus() -> None:
    exposition = parse_dcgm(_read("h100x4_two_pods_t0.prom"))
    assert [r.labels["gpu"] for r in exposition.select(dict(LLAMA))] == ["0", "1"]
    assert [r.labels["gpu"] for r in exposition.select(dict(DEEPSEEK))] == ["2", "3"]
    assert [r.labels["gpu"] for r in exposition.select({"Hostname": "gpu-node-a", "gpu": "[23]"})] == ["2", "3"]
    assert exposition.select({"pod": "llama"}) == []  # full match, not a substring
    assert exposition.select(None) == []  # pod-mapped, no pod named after the model: no guess
    unmapped = parse_dcgm(_read("h100x4_default_counters.prom"))
    assert len(unmapped.select(None)) == 4  # no pod labels at all: the exporter serves one model's GPUs
    assert len(exposition.select(None, frozenset({"llama-70b-7d9f8-abcde"}))) == 2


def test_stage_window_means_energy_reset_and_missing_field() -> None:
    window = GpuWindow()
    for name, at in (("h100x4_two_pods_t0.prom", 0.0), ("h100x4_two_pods_t1_reset.prom", 10.0)):
        window.add(_sample(name, DEEPSEEK, at))
    summary = window.summary()
    assert summary.gpus == 2 and summary.samples == 2 and summary.source == "dcgm"
    assert summary.dram_active.mean == pytest.approx((0.402117 + 0.409905) / 2)
    assert summary.tensor_active.max == pytest.approx(0.553210)
    assert summary.sm_active is None  # the exporter does not serve it
    assert summary.gpu_util.mean == pytest.approx(0.975)
    assert summary.power_w == pytest.approx(603.5 + 611.0)  # mean over scrapes of the per-scrape sum
    # GPU 2 advanced 6,035,000 mJ; GPU 3's counter went down to 6,110,000: a reset, the new value is the delta.
    assert summary.energy_j == pytest.approx((6035000 + 6110000) / 1000) and summary.energy_from == "counter"
    assert summary.fb_used_gib == pytest.approx(2 * 74569 / 1024)
    assert summary.bound == "neither"  # DRAM 41 %, tensor 55 %: neither dominates 2:1


def test_stages_split_energy_and_the_first_sample_is_a_baseline() -> None:
    window = GpuWindow()
    window.add(_sample("h100x4_two_pods_t0.prom", LLAMA, 0.0))
    first = window.close()
    assert first.energy_j is None and first.samples == 1  # one scrape: nothing to difference yet
    window.add(_sample("h100x4_two_pods_t1_reset.prom", LLAMA, 10.0))
    second = window.close()
    assert second.energy_j == pytest.approx((5122500 + 4987500) / 1000)
    assert second.bound == "bandwidth"  # DRAM 78 %, tensor 12 %


def test_energy_from_power_when_the_counter_is_absent() -> None:
    window = GpuWindow()
    window.add(_sample("h100x4_no_energy.prom", LLAMA, 0.0))
    window.add(_sample("h100x4_no_energy.prom", LLAMA, 4.0))
    summary = window.summary()
    assert summary.energy_from == "power"
    assert summary.energy_j == pytest.approx(4.0 * (512.25 + 498.75))


def test_default_counters_only_have_no_activity_and_no_bound() -> None:
    window = GpuWindow()
    window.add(_sample("h100x4_default_counters.prom", (), 0.0))
    summary = window.summary()
    assert summary.dram_active is None and summary.tensor_active is None and summary.bound is None
    assert summary.gpus == 4 and summary.power_w == pytest.approx(512.25 + 498.75 + 603.5 + 611.0)


@pytest.mark.parametrize(
    ("dram", "tensor", "bound"),
    [
        (0.78, 0.12, "bandwidth"),
        (0.20, 0.65, "compute"),
        (0.41, 0.55, "neither"),
        (0.10, 0.04, "neither"),
        (0.30, 0.15, "bandwidth"),
        (0.24, 0.01, "neither"),
        (0.26, 0.01, "bandwidth"),
        (None, 0.5, None),
    ],
)
def test_bound_rule(dram: float | None, tensor: float | None, bound: str | None) -> None:
    assert classify_bound(dram, tensor) == bound


@pytest.mark.parametrize("body", ["<html><body>404 page not found</body></html>", "vllm:num_requests_running 3\n"])
def test_not_dcgm_is_refused(body: str) -> None:
    assert not any(line.startswith("DCGM_FI_") for line in body.splitlines())  # no DCGM sample line at all
    with pytest.raises(ServerMetricsError):
        parse_dcgm(body)


def _poller(
    bodies: dict[str, list[str]], targets: list[GpuTarget]
) -> ScrapePoller[GpuTarget, GpuExposition, GpuSample, GpuSummary]:
    counters = dict.fromkeys(bodies, 0)

    def fetch(url: str) -> str:
        n = counters[url]
        counters[url] += 1
        seq = bodies[url]
        if seq[min(n, len(seq) - 1)] == "404":
            raise ServerMetricsError("http", f"{url} answered HTTP 404")
        return _read(seq[min(n, len(seq) - 1)])

    clock = iter(float(i) * 10 for i in range(100))
    return ScrapePoller(GPU, targets, interval_s=1.0, fetch=fetch, clock=lambda: next(clock))


def test_poller_two_models_one_exporter_and_a_404(caplog: pytest.LogCaptureFixture) -> None:
    url, missing, guessed = "http://dcgm:9400/metrics", "http://gone:9400/metrics", "http://vllm:8000/metrics"
    poller = _poller(
        {url: ["h100x4_two_pods_t0.prom", "h100x4_two_pods_t1_reset.prom"], missing: ["404"], guessed: ["404"]},
        [
            GpuTarget("llama", url, frozenset({"llama"}), selector=LLAMA),
            GpuTarget("deepseek", url, frozenset({"deepseek"}), selector=DEEPSEEK),
            GpuTarget("broken", missing, frozenset({"x"})),
            GpuTarget("quiet", guessed, frozenset({"y"}), explicit=False),
        ],
    )
    with caplog.at_level("DEBUG"):
        poller.poll_once()
        stage = poller.close_stage()
    assert stage["broken"] is None and stage["quiet"] is None
    assert stage["llama"].energy_j == pytest.approx((5122500 + 4987500) / 1000)
    assert stage["deepseek"].gpus == 2
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "broken" in warnings[0].getMessage() and "gpu_metrics_url" in warnings[0].getMessage()


def test_config_keys_json_and_toml(tmp_path: Path) -> None:
    from attnload.config.load import load_config

    json_path = tmp_path / "c.json"
    json_path.write_text(
        json.dumps(
            {
                "base_url": "http://127.0.0.1:8000",
                "models": {
                    "m": {
                        "id": "llama-3-70b",
                        "attention_type": "GQA",
                        "gpu_metrics_url": "http://dcgm:9400/metrics",
                        "gpu_selector": {"namespace": "vllm", "pod": "llama-.*"},
                    }
                },
            }
        )
    )
    model = load_config(json_path).models[0]
    assert model.gpu_metrics_url == "http://dcgm:9400/metrics" and model.gpu_selector == {
        "namespace": "vllm",
        "pod": "llama-.*",
    }
    toml_path = tmp_path / "c.toml"
    toml_path.write_text(
        '[provider]\nbase_url = "http://127.0.0.1:8000"\n[models.m]\nid = "x"\nattention = "MLA"\n'
        'gpu_metrics_url = "http://dcgm:9400/metrics"\ngpu_selector = {Hostname = "n1", gpu = "0|1"}\n'
    )
    assert load_config(toml_path).models[0].gpu_selector == {"Hostname": "n1", "gpu": "0|1"}


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("gpu_selector", {"pod": "llama-(["}, "not a valid regular expression"),
        ("gpu_selector", {"bad-label": "x"}, "not a Prometheus label name"),
        ("gpu_selector", "pod=llama", "gpu_selector"),
        ("gpu_metrics_url", "dcgm:9400", "gpu_metrics_url"),
        ("gpu_selector", {f"l{i}": "x" for i in range(17)}, "at most 16"),
    ],
)
def test_bad_gpu_config_is_one_line(tmp_path: Path, key: str, value: object, says: str) -> None:
    from attnload.config.load import load_config

    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {"base_url": "http://127.0.0.1:8000", "models": {"m": {"id": "x", "attention_type": "GQA", key: value}}}
        )
    )
    with pytest.raises(UsageError) as info:
        load_config(path)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_selector_that_matches_nothing_turns_off_after_three_scrapes(caplog: pytest.LogCaptureFixture) -> None:
    url = "http://dcgm:9400/metrics"
    poller = _poller(
        {url: ["h100x4_two_pods_t0.prom"]}, [GpuTarget("typo", url, frozenset({"x"}), selector=(("pod", "lama-.*"),))]
    )
    poller.poll_once()
    poller.poll_once()
    assert poller.off() == {}
    poller.poll_once()
    assert "typo" in poller.off() and "fix gpu_selector" in poller.off()["typo"]


def test_sim_activity_follows_the_roofline_and_power_stays_under_tdp() -> None:
    from attnload.sim.costmodel import EngineConfig, GroupLoad, decode_step, deploy
    from attnload.sim.gpu import GpuActivity, dcgm_text, step_activity
    from attnload.sim.presets import PRESETS

    dep = deploy(PRESETS["llama-3-70b"], EngineConfig(kv_capacity_scale=0.05))
    decode = decode_step(dep, 64, 2000)
    dram, tensor, busy = (x / decode.total_s for x in step_activity(dep, decode))
    assert dram > 0.35 and tensor < 0.15 and dram > 3 * tensor  # GQA decode streams weights and KV
    prefill = dep.step_breakdown([GroupLoad.of((), ((0, 4000),))])
    dram_p, tensor_p, _ = (x / prefill.total_s for x in step_activity(dep, prefill))
    assert tensor_p > 2 * dram_p  # a long prefill chunk is tensor math
    now = [0.0]
    activity = GpuActivity(dep, lambda: now[0])
    t = 0.0
    while t < 2.0:  # two seconds of back-to-back decode steps
        t += decode.total_s
        activity.step(decode, t)
    now[0] = t
    gauges = activity.gauges()
    assert gauges["DCGM_FI_PROF_DRAM_ACTIVE"] == pytest.approx(dram, rel=0.02)
    assert gauges["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == pytest.approx(tensor, rel=0.02)
    assert gauges["DCGM_FI_DEV_GPU_UTIL"] == round(100 * busy)
    assert dep.hw.idle_w < gauges["DCGM_FI_DEV_POWER_USAGE"] <= dep.hw.tdp_w
    energy_j = gauges["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] / 1000
    assert dep.hw.idle_w * t < energy_j <= dep.hw.tdp_w * t
    now[0] = t + 5.0  # five idle seconds: activity 0, power idle, energy grows by idle power only
    idle = activity.gauges()
    assert idle["DCGM_FI_PROF_DRAM_ACTIVE"] == 0 and idle["DCGM_FI_DEV_POWER_USAGE"] == dep.hw.idle_w
    assert idle["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] / 1000 == pytest.approx(energy_j + 5 * dep.hw.idle_w, abs=1)
    text = dcgm_text([("llama-3-70b", activity)])
    parsed = parse_dcgm(text)
    assert parsed.source == "dcgm" and len(parsed.readings) == 8  # no attnload_sim_* here: plain DCGM text
    assert {r.labels["pod"] for r in parsed.readings} == {"llama-3-70b"}


def test_gpu_metrics_option_and_its_env_twin() -> None:
    from attnload.plan.options import OPTION, server_metrics_mode

    option = OPTION["gpu-metrics"]
    assert option.env == "ATTNLOAD_GPU_METRICS" and option.locust_flag == "--attnload-gpu-metrics"
    assert option.run is not None and option.run["choices"] == ("auto", "off")
    assert server_metrics_mode("OFF", "--gpu-metrics") == "off"
    with pytest.raises(UsageError, match="--gpu-metrics 'sometimes': use auto or off"):
        server_metrics_mode("sometimes", "--gpu-metrics")


def _results_with_gpu() -> object:
    from attnload.results.model import Results

    gpu = {
        "source": "dcgm",
        "gpus": 2,
        "samples": 10,
        "dram_active": {"mean": 0.78, "max": 0.8},
        "tensor_active": {"mean": 0.12, "max": 0.13},
        "sm_active": None,
        "gpu_util": {"mean": 1.0, "max": 1.0},
        "power_w": 1011.0,
        "energy_j": 2022.0,
        "energy_from": "counter",
        "joules_per_output_token": 0.5,
        "fb_used_gib": 143.6,
        "bound": "bandwidth",
    }
    stage = {"index": 1, "users": 64, "completion_tokens": 4044, "requests": {"ok": 10}, "gpu": gpu}
    return Results.model_validate(
        {
            "schema": "attnload.results/v1",
            "started_at": "2026-12-01T00:00:00+00:00",
            "ended_at": "2026-12-01T00:01:00+00:00",
            "duration_s": 60.0,
            "config_sha256": "x",
            "models": [
                {
                    "key": "gqa_model",
                    "model": "llama-3-70b",
                    "attention": "GQA",
                    "completion_tokens": 4044,
                    "attention_info": {"kv_bytes_per_token": 327680},
                    "stages": [stage],
                    "gpu": gpu,
                },
                {
                    "key": "mla_model",
                    "model": "deepseek-v3",
                    "attention": "MLA",
                    "stages": [{"index": 1, "users": 64, "requests": {"ok": 5}}],
                },
            ],
        }
    )


def test_gpu_view_renders_in_console_html_tab_and_explanation() -> None:
    from rich.console import Console

    from attnload.report import gpu as gpu_view
    from attnload.report.console import render_table
    from attnload.report.explain import explain
    from attnload.report.html import render_html
    from attnload.report.live.webui import llm_rows

    results = _results_with_gpu()
    console = Console(width=200, record=True)
    console.print(render_table(results))  # type: ignore[arg-type]
    text = console.export_text()
    assert "GPU view" in text and "78%" in text and "12%" in text and "bandwidth" in text and "1,011" in text
    assert "no GPU metrics for mla_model" in text
    html = render_html(results)  # type: ignore[arg-type]
    assert 'id="gpu-table"' in html and 'data-field="gpu.dram_active.mean" data-value="0.78"' in html
    row = llm_rows(results)[0]  # type: ignore[arg-type]
    assert row["gpu_dram_pct"] == "78.0 %" and row["gpu_bound"] == "bandwidth"
    assert llm_rows(results)[1]["gpu_dram_pct"] == ""  # type: ignore[arg-type]
    paragraphs = " ".join(explain(results))  # type: ignore[arg-type]
    assert (
        "kept DRAM 78% active and tensor pipes 12%: bandwidth-bound, as 320 KiB of KV per token predicts" in paragraphs
    )
    assert gpu_view.has_gpu(results)  # type: ignore[arg-type]


def test_gpu_targets_explicit_guessed_and_not_guessed(tmp_path: Path) -> None:
    from attnload.config.load import load_config
    from attnload.runner.collector.gpuview import gpu_targets

    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "base_url": "http://127.0.0.1:8000/v1",
                "models": {
                    "a": {
                        "id": "llama-3-70b",
                        "attention_type": "GQA",
                        "gpu_metrics_url": "http://dcgm:9400/metrics",
                        "gpu_selector": {"pod": "llama-.*"},
                    },
                    "b": {"id": "deepseek-v3", "attention_type": "MLA", "metrics_url": "http://127.0.0.1:8001/metrics"},
                },
            }
        )
    )
    config = load_config(path)
    a, b = gpu_targets(config)
    assert (a.url, a.explicit, a.selector) == ("http://dcgm:9400/metrics", True, (("pod", "llama-.*"),))
    assert (b.url, b.explicit, b.selector) == ("http://127.0.0.1:8001/metrics", False, ())
    assert [t.key for t in gpu_targets(config, guess=False)] == ["a"]  # --server-metrics off: no guess
