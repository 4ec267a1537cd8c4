"""The attention microscope's parts without a server: the decode fit's sums (both paths, merged like the
histograms), the ``decode:A-B`` shape and its max_context check, ``kv_read``'s arithmetic and the sentence."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnload import native
from attnload.config.load import load_config
from attnload.config.model import TestConfig as Config
from attnload.errors import UsageError
from attnload.measure.decodefit import WINDOW_TOKENS, DecodeFit, request_fit
from attnload.measure.metrics import RequestRecord
from attnload.measure.recorder import Recorder
from attnload.results.microscope.capacity import Bracket, knee, kv_capacity, next_users
from attnload.results.microscope.fit import fit_summary, lockstep_cut
from attnload.results.microscope.kvread import kv_read
from attnload.results.microscope.schema import DecodeFitSummary, KvRead
from attnload.results.microscope.sentences import mechanism_sentence
from attnload.scrape.summary import ServerSummary
from attnload.workload.ladder import check_decode
from attnload.workload.prompts import Workload
from attnload.workload.shapes import DecodeSpec, parse_shape
from helpers.results import GQA_INFO, MLA_INFO

PATHS = ["python"] + (["compiled"] if native.extension() is not None else [])


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest) -> Iterator[str]:
    native.use(request.param == "compiled")
    yield request.param
    native.reset()


def _config(tmp_path: Path, **models: dict[str, object]) -> Config:
    data = {
        "base_url": "http://127.0.0.1:9",
        "models": models
        or {
            "gqa_model": {"id": "llama-3-70b", "attention_type": "GQA", "max_context": 65536},
            "mla_model": {"id": "deepseek-chat", "attention_type": "MLA", "max_context": 65536},
        },
        "workload": {"w": {"prompt_tokens": 100, "max_tokens": 64}},
    }
    file = tmp_path / "config.json"
    file.write_text(json.dumps(data), encoding="utf-8")
    return load_config(file)


def _answer(prompt: int, tokens: int, step_s: float, per_token_s: float, chunk: int = 1) -> tuple:
    """ITL samples of an answer whose token k took ``step_s + per_token_s × position`` (chunks of ``chunk``)."""
    samples = []
    position = prompt + 1
    while position < prompt + tokens:
        k = min(chunk, prompt + tokens - position)
        gap = sum(step_s + per_token_s * (position + j) for j in range(k))
        samples.append((gap / k, k))
        position += k
    return tuple(samples)


# ---------------------------------------------------------------------------- the fit


def test_a_linear_step_comes_back_exactly_from_either_path(path: str) -> None:
    """ITL = 5 ms + 0.175 ms per 1K tokens: slope, intercept and r² = 1, bursty chunks included."""
    per_token_s = 0.175e-3 / 1024
    fit = DecodeFit()
    for chunk in (1, 1, 3, 7):
        fit.merge(request_fit(1024, 4096, _answer(1024, 4096, 0.005, per_token_s, chunk)))
    summary = fit_summary(fit)
    assert summary is not None and summary.sequences == 4
    # the line through the binned medians: their 0.2 % buckets are all that is lost
    assert summary.slope_ms_per_1k == pytest.approx(0.175, rel=0.01)
    assert summary.intercept_ms == pytest.approx(5.0, rel=2e-3)
    assert summary.r2 == pytest.approx(1.0, abs=1e-2)
    assert summary.mean_slope_ms_per_1k == pytest.approx(0.175, rel=1e-4)  # the sums' line is exact
    # every token after the first window (32 tokens, or the chunk that crosses it) is a sample
    assert 4 * (4095 - WINDOW_TOKENS - 7) <= summary.samples <= 4 * (4095 - WINDOW_TOKENS)
    assert summary.positions == [1024 + 1 + WINDOW_TOKENS, 1024 + 4095]
    medians = [itl for _position, itl, _n in summary.bins]
    assert medians == sorted(medians) and len(summary.bins) >= 10  # binned medians rise with the line


def test_both_paths_give_equal_sums_and_bins() -> None:
    if native.extension() is None:
        pytest.skip("the C extension is not built")
    rng = random.Random(7)
    for _ in range(40):
        samples = tuple(
            (rng.random() * 0.02 * (20 if rng.random() < 0.02 else 1), rng.choice((1, 1, 1, 2, 5, 40)))
            for _ in range(rng.randint(0, 400))
        )
        native.use(True)
        compiled = request_fit(2000, 2400, samples)
        native.use(False)
        python = request_fit(2000, 2400, samples)
        assert [getattr(compiled, f) for f in DecodeFit.__slots__] == [getattr(python, f) for f in DecodeFit.__slots__]
    native.reset()


def test_a_late_read_and_its_catch_up_burst_stay_out_of_the_line(path: str) -> None:
    """A read 300 ms late and the burst that catches up (the server kept its 5 ms steps): a window boundary
    between them would put a high and a low point into the line; the window grows over both instead."""
    for at in (1000, 1010, 1020):  # wherever the window boundaries fall
        samples = list(_answer(1000, 2048, 0.005, 0.0))
        samples[at : at + 60] = [(0.295, 1), (0.005 / 59, 59)]  # the same 60 tokens in the same 0.3 s
        fit = fit_summary(request_fit(1000, 2048, tuple(samples)))
        assert fit is not None and fit.slope_ms_per_1k is not None
        assert abs(fit.slope_ms_per_1k) < 1e-6 and fit.intercept_ms == pytest.approx(5.0, rel=2e-3), (at, fit)
        assert fit.mean_slope_ms_per_1k is not None and abs(fit.mean_slope_ms_per_1k) < 1e-6
        assert fit.samples == 2047 - WINDOW_TOKENS  # every token after the first window, none dropped


def test_stalls_late_in_a_run_tilt_the_mean_line_not_the_medians(path: str) -> None:
    """Every 20th window of the second half holds a 100 ms stall the server never caught up (a busy machine
    late in the run): the mean line rises, the medians' line stays flat, and the note says so."""
    whole = DecodeFit()
    for answer in range(8):  # a batch of 8 sequences, each stalled at its own places
        samples = list(_answer(1000, 4096, 0.005, 0.0))
        for at in range(2048 + 80 * answer, 4000, 640):
            samples[at] = (0.105, 1)
        whole.merge(request_fit(1000, 4096, tuple(samples)))
    fit = fit_summary(whole)
    assert fit is not None and fit.slope_ms_per_1k is not None and fit.mean_slope_ms_per_1k is not None
    assert abs(fit.slope_ms_per_1k) < 0.005 < fit.mean_slope_ms_per_1k
    assert fit.note is not None and "the mean line's slope" in fit.note


def test_the_fit_merges_across_workers_like_the_histograms(path: str) -> None:
    """Two workers' deltas merged on the master equal one process that saw every answer."""
    answers = [_answer(512 * (i + 1), 600, 0.004 + 0.001 * i, 1e-7) for i in range(6)]
    one, master = Recorder(), Recorder()
    workers = [Recorder(), Recorder()]
    for i, samples in enumerate(answers):
        record = RequestRecord("m", "w", 0, "ok", None, 0.05, samples, 3.0, 512 * (i + 1), 600, None, False)
        one.add(record)
        workers[i % 2].add(record)
    for worker in workers:
        master.merge_delta(json.loads(json.dumps(worker.take_delta())))
    a, b = one.combined().fit, master.combined().fit
    assert (a.n, a.sequences, a.bins, a.lo, a.hi) == (b.n, b.sequences, b.bins, b.lo, b.hi)
    assert a.line() == pytest.approx(b.line())


def test_failed_answers_and_answers_too_short_for_a_window_give_no_samples() -> None:
    recorder = Recorder()
    recorder.add(
        RequestRecord("m", "w", 0, "failed", "http", 0.05, _answer(100, 500, 0.005, 0.0), 3.0, 0, 0, None, False)
    )
    recorder.add(RequestRecord("m", "w", 0, "ok", None, 0.05, _answer(100, 20, 0.005, 0.0), 0.2, 100, 20, None, False))
    assert recorder.combined().fit.n == 0 and fit_summary(recorder.combined().fit) is None


def test_a_cut_decode_stage_says_what_is_missing() -> None:
    assert lockstep_cut(16, 16) is None
    assert lockstep_cut(16, 12) == (
        "4 of 16 answers did not finish inside the stage (cut by --stage-duration or failed): "
        "the fit holds only the tokens that came"
    )


# ---------------------------------------------------------------------------- the shape


def test_decode_shape_parses_a_span_and_a_users_grid() -> None:
    spec = parse_shape("decode:1k-5k", 60.0)
    assert isinstance(spec, DecodeSpec) and spec.levels == (1024, 5120) and spec.lockstep and spec.sizes_prompts
    grid = spec.with_users((1, 8, 32))
    assert [(s.users, s.decode, s.context) for s in grid.stages] == [
        (1, (1024, 5120), None),  # no ladder rung: the results' context stays null
        (8, (1024, 5120), None),
        (32, (1024, 5120), None),
    ]
    assert grid.duration_s == 180.0 and grid.peak_users == 32
    assert parse_shape(grid.to_text(), 60.0) == grid  # what every Locust process reads back


@pytest.mark.parametrize("text", ["decode:5k-1k", "decode:1k", "decode:1k-", "decode:a-b", "decode:0-1k"])
def test_bad_decode_spans_are_one_line_usage_errors(text: str) -> None:
    with pytest.raises(UsageError) as error:
        parse_shape(text, 60.0)
    assert "decode:" in str(error.value) and "\n" not in str(error.value)


def test_a_decode_stage_pins_prompt_and_output(tmp_path: Path) -> None:
    workload = Workload(_config(tmp_path))
    workload.context, workload.output = 2048, 1024  # what a decode:2k-3k stage sets
    plan = workload.next()
    assert (plan.max_tokens, plan.ignore_eos) == (1024, True)


def test_an_end_over_max_context_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        gqa_model={"id": "llama-3-70b", "attention_type": "GQA", "max_context": 65536},
        mla_model={"id": "deepseek-chat", "attention_type": "MLA"},
    )
    check_decode(config, 1024, 65536)
    with pytest.raises(UsageError) as error:
        check_decode(config, 1024, 204800)
    text = str(error.value)
    assert "gqa_model" in text and "max_context 65,536" in text and "204,800" in text and "\n" not in text


# ---------------------------------------------------------------------------- kv_read and the sentence


def _fit(slope: float) -> DecodeFitSummary:
    return DecodeFitSummary(samples=60000, slope_ms_per_1k=slope, intercept_ms=5.0, r2=0.8, sequences=16)


def test_kv_read_is_slope_times_bandwidth_over_the_sequences_a_gpu_holds(tmp_path: Path) -> None:
    """GQA TP8: every GPU reads its heads of all 16 sequences; MLA DP8: a rank holds 2 of the 16."""
    config = _config(
        tmp_path,
        gqa_model={"id": "llama-3-70b", "attention_type": "GQA", "gpu_type": "h200"},
        mla_model={"id": "deepseek-chat", "attention_type": "MLA", "memory_bandwidth_gbps": 4800},
    )
    gqa, mla = config.models
    gqa_read = kv_read(gqa, {**GQA_INFO, "dp_attention": 1}, [(0, 16, _fit(0.175))], lambda name: 4800.0)
    assert gqa_read.sequences_per_gpu == 16 and gqa_read.bandwidth_source == "gpu_type"
    expected = 0.175e-3 / 1024 * 4.8e12 / 16  # 51.3 KB: 1.25× the 40 KiB of the KV math at 80 % of peak
    assert gqa_read.measured_bytes_per_token_per_gpu == pytest.approx(expected, rel=1e-4)
    assert gqa_read.ratio == pytest.approx(expected / 40960, rel=1e-3) and gqa_read.bound == "memory"
    mla_read = kv_read(mla, {**MLA_INFO, "dp_attention": 8}, [(0, 4, _fit(0.02)), (1, 16, _fit(0.058))])
    assert mla_read.stage == 1 and mla_read.sequences_per_gpu == 2  # the largest batch is used
    assert mla_read.bound == "compute" and mla_read.bandwidth_source == "memory_bandwidth_gbps"
    sentence = mechanism_sentence({"gqa_model": gqa_read, "mla_model": mla_read})
    assert sentence is not None
    assert "gqa_model grows 0.175 ms per 1K tokens" in sentence and "mla_model grows 0.058 ms" in sentence
    assert "50 KiB read per token per GPU against 40 KiB" in sentence
    assert "gqa_model's decode slows 3.0× as fast with context as mla_model's" in sentence


def test_kv_read_without_bandwidth_gives_the_slope_and_says_what_is_missing(tmp_path: Path) -> None:
    target = _config(tmp_path, m={"id": "tiny-gqa", "attention_type": "GQA"}).models[0]
    read = kv_read(target, {}, [(0, 4, _fit(0.3))])
    assert read.slope_ms_per_1k == 0.3 and read.measured_bytes_per_token_per_gpu is None
    assert read.note is not None and "gpu_type" in read.note and "memory_bandwidth_gbps" in read.note
    unknown = _config(tmp_path, m={"id": "x", "attention_type": "GQA", "gpu_type": "tpu9"}).models[0]
    assert "tpu9" in (kv_read(unknown, {}, [(0, 4, _fit(0.3))]).note or "")
    assert "decode sweep" in (kv_read(target, {}, []).note or "")
    assert mechanism_sentence({"m": KvRead()}) is None


def test_gpu_type_and_bandwidth_keys_load_and_a_bad_one_names_the_key(tmp_path: Path) -> None:
    target = _config(tmp_path, m={"id": "x", "attention_type": "GQA", "gpu_type": "h200"}).models[0]
    assert (target.gpu_type, target.memory_bandwidth_gbps) == ("h200", None)
    with pytest.raises(UsageError) as error:
        _config(tmp_path, m={"id": "x", "attention_type": "GQA", "memory_bandwidth_gbps": -1})
    assert "memory_bandwidth_gbps" in str(error.value)


# ---------------------------------------------------------------------------- the capacity probe


def _server(running: float, waiting_mean: float = 0.0, usage: float = 0.3) -> ServerSummary:
    return ServerSummary.model_validate(
        {
            "source": "vllm",
            "samples": 5,
            "requests_running": {"mean": running, "max": running},
            "requests_waiting": {"mean": waiting_mean, "max": waiting_mean},
            "kv_cache_usage": {"mean": usage, "max": usage},
            "preemptions": 0,
        }
    )


def test_the_knee_is_a_queue_a_full_cache_or_preemptions_else_ttft_doubling() -> None:
    assert knee(_server(4, waiting_mean=0.2), 0.3, 0.2) is None  # a closed loop's next request, caught waiting
    assert knee(_server(17, waiting_mean=3.0), 0.3, 0.2) == "requests waiting"
    assert knee(_server(17, usage=0.99), 0.3, 0.2) == "KV cache full"
    assert knee(None, 0.5, 0.2) == "TTFT p50 over 2× the first stage's"  # no server view: the client's TTFT
    assert knee(None, 0.3, 0.2) is None


def test_users_double_then_bisect_the_widest_bracket() -> None:
    brackets = {"gqa": Bracket(), "mla": Bracket()}
    for users in (1, 2, 4, 8, 16):
        for bracket in brackets.values():
            bracket.note(users, None)
        assert next_users(brackets, users, 256, 4) == users * 2
    brackets["gqa"].note(32, "requests waiting")
    assert next_users(brackets, 32, 256, 4) == 64  # mla has not shown its knee yet
    brackets["mla"].note(64, "KV cache full")
    brackets["mla"].note(32, None)
    assert next_users(brackets, 64, 256, 4) == 23  # gqa's 16..32 and mla's 32..64 are as wide: the first
    assert next_users(brackets, 64, 256, 0) is None  # no bisection left


def test_kv_capacity_is_the_servers_running_at_the_knee() -> None:
    stages = [(8, _server(8), None), (16, _server(16), None), (32, _server(17, 14.0, 0.98), "requests waiting")]
    cap = kv_capacity(8192, 256, stages, 8, 2_882_816)
    assert (cap.max_running, cap.kv_tokens, cap.per_gpu, cap.knee) == (17, 17 * 8448, 17 * 8448 / 8, "requests waiting")
    assert cap.ratio == pytest.approx(17 * 8448 / 2_882_816, abs=1e-3)
    client_only = kv_capacity(
        8192, 256, [(8, None, None), (16, None, "TTFT p50 over 2× the first stage's")], None, None
    )
    assert client_only.max_running == 8 and client_only.per_gpu is None and "no server view" in (client_only.note or "")
    assert "lower bound" in (kv_capacity(8192, 256, [(8, None, None)], 8, None).note or "")


def test_capacity_shape_parses_one_context_and_plans_live() -> None:
    spec = parse_shape("capacity:8k", 10.0)
    assert spec.fixed_context == 8192 and spec.stages == () and not spec.lockstep
    assert parse_shape(spec.to_text(), 10.0) == spec and spec.duration_s == 130.0
    for bad in ("capacity:", "capacity:eight", "capacity:0"):
        with pytest.raises(UsageError) as error:
            parse_shape(bad, 10.0)
        assert "capacity:" in str(error.value) and "\n" not in str(error.value)
