"""Launch a run: validate everything up front, then start real Locust processes.

One master plus ``--workers K`` local worker processes (or one local process when
K = 0), all running the packaged locustfile with ``ATTNLOAD_*`` environment variables.
The master writes the results; this process waits, then prints the summary table.
Bad input is caught here, before any process starts, as one line with exit status 2.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnload.client.reach import check_reachable
from attnload.config.load import load_config
from attnload.config.model import TestConfig
from attnload.errors import UsageError
from attnload.plan.arrivalflags import check_arrival_flags
from attnload.plan.children import INTERRUPT_GRACE_S, PARENT_PID_ENV, WORKER_DEATH_SIGNAL, die_with_parent
from attnload.plan.flagcheck import check_flag_limits
from attnload.plan.options import RunOptions, environment, launch_texts, run_options, with_shape
from attnload.plan.traffic import check_traffic
from attnload.plan.writable import check_outputs
from attnload.results.model import Results, load_results
from attnload.results.requests_file import requests_out_path
from attnload.results.write import fallback_dir
from attnload.workload.ladder import parse_users_list
from attnload.workload.prompts import check_prompts
from attnload.workload.shapes import ShapeSpec, parse_duration, parse_shape

LOCUSTFILE = Path(__file__).parents[1] / "commands" / "locustfile.py"
"""The packaged locustfile (an entry point, so it lives with the commands; ``locustfiles/chat.py`` imports it)."""
DEFAULT_DURATION = "60s"


@dataclass(frozen=True)
class LoadPlan:
    """A validated run: config, the options every Locust process is handed, and the process layout."""

    config: TestConfig
    options: RunOptions
    """Read from the command line by each option's own reader; ``options.given`` is what the processes get."""
    workers: int
    results_dir: Path
    """``--results`` as given (the processes get it absolute)."""
    headless: bool = True
    web_port: int = 8089
    prometheus_port: int | None = None
    stop_timeout_s: float = 0.0

    @property
    def shape(self) -> ShapeSpec:
        assert self.options.shape is not None  # the planner always sets one
        return self.options.shape


@dataclass(frozen=True)
class RunOutcome:
    """What :func:`execute_run` saw: the results (None: none written) and the signal that stopped it."""

    results: Results | None
    signal_received: int | None = None
    signalled: str = ""
    """Which process the signal stopped ("" : ``attnload run`` itself; else e.g. "the Locust master")."""


def plan_from_args(args: argparse.Namespace, config_path: Path) -> LoadPlan:
    flags = vars(args)  # the command line, read once by option name (a demo's namespace may leave some out)
    config = load_config(config_path)
    for target in config.models:
        target.api_key()  # a missing env var fails now, not in every worker
    workers = int(flags.get("workers", 0))
    if workers < 0 or workers > 256:
        raise UsageError(f"--workers {workers} is out of range: use 0 (one process) to 256")
    shape = _shape_from_flags(flags, config)
    texts = with_shape(launch_texts(flags), shape)
    texts.update(config=str(config_path.resolve()), results=str(Path(texts["results"]).resolve()))
    requests_out = requests_out_path(texts.pop("requests-out", None))
    if requests_out:
        texts["requests-out"] = requests_out
    options = run_options(texts, shape)
    chosen = [config.profile(name) for name in options.profiles] or list(config.profiles)
    check_prompts(chosen, shape.sizes_prompts)
    check_traffic(config, chosen)
    shape.check_run(config, chosen, options.paired)
    if options.paired and len(config.models) < 2:
        raise UsageError("--paired compares models prompt by prompt: the config needs at least two models")
    check_arrival_flags(options)
    results_dir = Path(str(flags.get("results", "results")))
    check_outputs(results_dir, requests_out, options.csv_prefix)  # before any request
    check_reachable(config)
    return LoadPlan(
        config=config,
        options=options,
        workers=workers,
        results_dir=results_dir,
        headless=bool(flags.get("headless", True)),
        web_port=int(flags.get("web_port", 8089)),
        prometheus_port=flags.get("prometheus"),
        stop_timeout_s=float(flags.get("stop_timeout") or 0.0),
    )


def _shape_from_flags(flags: Mapping[str, Any], config: TestConfig) -> ShapeSpec:
    """The run's shape from ``--shape`` (or the config's ``shape``) and ``--users`` (a list only for a ladder);
    the numeric flags are bounds-checked here too."""
    users_text = None if flags.get("users") is None else str(flags["users"]).strip()
    single = users_text is not None and "," not in users_text
    if single:
        try:
            float(str(users_text))
        except ValueError:
            raise UsageError(f"--users {users_text!r} is not a number: give a whole number of users") from None
    check_flag_limits(flags if single else {**flags, "users": None})
    users = parse_users_list(users_text) if users_text is not None else None
    stage_s = parse_duration(
        flags.get("stage_duration") or config.stage_duration_s or DEFAULT_DURATION, "--stage-duration"
    )
    shape_text = flags.get("shape") or config.shape
    if shape_text:
        shape = parse_shape(shape_text, stage_s, flags.get("replay_speed"))
        return shape if users is None else shape.with_users(users)
    if users is not None and len(users) > 1:
        raise UsageError(
            f"--users {users_text}: a list of users needs --shape context:LIST (a grid) or decode:A-B; give one"
        )
    duration = parse_duration(flags.get("duration") or DEFAULT_DURATION, "--duration")
    return parse_shape(f"concurrency:{users[0] if users else 8}", duration)


def execute(plan: LoadPlan, *, quiet: bool = False) -> Results | None:
    """Start master and workers (and Prometheus if asked), wait, print and return the results."""
    return execute_run(plan, quiet=quiet).results


def execute_run(plan: LoadPlan, *, quiet: bool = False) -> RunOutcome:
    """:func:`execute`, also saying which signal (SIGTERM, SIGINT) stopped the run, if one did."""
    started = time.time()
    _raise_fd_limit(plan)
    env = _environment(plan)
    prometheus = _start_prometheus(plan) if plan.prometheus_port else None
    master_port = free_port()
    processes = [_spawn(_master_command(plan, master_port), env)]
    for _ in range(plan.workers):
        worker = [*_base_command(), "--worker", "--master-host", "127.0.0.1", "--master-port", str(master_port)]
        processes.append(_spawn(worker, env, WORKER_DEATH_SIGNAL))
    stop = _Forwarder(processes[0], plan.stop_timeout_s)
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.received(signal.SIGTERM))
    child_signal: tuple[int, str] | None = None
    try:
        stop.wait()
        child_signal = stopped_by_signal(processes)
    finally:
        signal.signal(signal.SIGTERM, previous)
        _stop(processes[1:], 1.0 if stop.signal_received else 10.0)
        if prometheus is not None:
            from attnload.dashboards.prometheus import stop_prometheus

            stop_prometheus(prometheus)
    master_killed = (processes[0].returncode or 0) < 0  # SIGKILL (ours at the deadline, or the OOM killer's)
    results = _latest_results(plan.results_dir, started, snapshots=master_killed)
    if results is not None and not quiet:
        _print_summary(results[0], results[1], plan.results_dir)
    if stop.signal_received is None and child_signal is not None:
        return RunOutcome(results[0] if results else None, child_signal[0], child_signal[1])
    return RunOutcome(results[0] if results else None, stop.signal_received)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def stopped_by_signal(processes: Sequence[subprocess.Popen[bytes]]) -> tuple[int, str] | None:
    """The stop signal (SIGTERM, SIGINT) that ended one of the run's processes, as its exit status says
    (Locust exits 128 + N after handling one; -N: it died of it), and which process: the master first."""
    for position, process in enumerate(processes):
        code = process.poll()
        if code is None:
            continue
        for signum in STOP_SIGNALS:
            if code in (128 + signum, -signum):
                return int(signum), "the Locust master" if position == 0 else f"Locust worker {position}"
    return None


class _Forwarder:
    """Waits for the master; forwards SIGTERM/SIGINT to it and bounds how long its stop may take.

    The children run in their own sessions (a terminal's Ctrl-C must not kill workers before the
    master has their final counts), so the master hears of a stop from here. It ends itself within
    ``--stop-timeout`` + :data:`INTERRUPT_GRACE_S` (7 s); two seconds later it is killed (its last snapshot
    stays), and workers get one more second: the whole stop fits in ``--stop-timeout`` + 10 s.
    """

    def __init__(self, master: subprocess.Popen[bytes], stop_timeout_s: float) -> None:
        self.master = master
        self.limit_s = stop_timeout_s + INTERRUPT_GRACE_S + 2.0  # + 1 s for the workers: + 10 s in all
        self.signal_received: int | None = None
        self._deadline: float | None = None

    def received(self, signum: int) -> None:
        if self.signal_received is None:
            self.signal_received = signum
            self._deadline = time.monotonic() + self.limit_s
        if self.master.poll() is None:
            self.master.send_signal(signal.SIGTERM)

    def wait(self) -> None:
        while self.master.poll() is None:
            try:
                self.master.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                if self._deadline is not None and time.monotonic() > self._deadline:
                    self.master.kill()
            except KeyboardInterrupt:
                self.received(signal.SIGINT)


def _raise_fd_limit(plan: LoadPlan) -> None:
    """Each stream holds a socket: lift the soft open-files limit to the hard one (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    peak_users = plan.shape.peak_users
    per_process = peak_users * (len(plan.config.models) if plan.options.paired else 1) / max(plan.workers, 1)
    if soft != resource.RLIM_INFINITY and per_process > soft - 64:
        print(
            f"attnload run: warning: ~{per_process:.0f} connections per worker against an open-files limit "
            f"of {soft}: add --workers or raise `ulimit -n`",
            file=sys.stderr,
        )


def _start_prometheus(plan: LoadPlan) -> subprocess.Popen[bytes]:
    """A local Prometheus scraping the master and any simulator on a loopback base_url."""
    from attnload.client.transport import Endpoint
    from attnload.dashboards.prometheus import PrometheusError, start_local_prometheus

    targets = {"attnload": f"127.0.0.1:{plan.options.metrics_port}"}
    for target in plan.config.models:
        endpoint = Endpoint.from_url(target.url)
        if endpoint.host in ("127.0.0.1", "localhost"):
            targets.setdefault("attnload-sim", f"{endpoint.host}:{endpoint.port}")
    data_dir = plan.results_dir / "prometheus"
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        process = start_local_prometheus(targets, data_dir, plan.prometheus_port or 9090, scrape_interval_s=2.0)
    except PrometheusError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    print(
        f"prometheus: http://127.0.0.1:{plan.prometheus_port}/ scraping {', '.join(targets.values())} "
        f"(data in {data_dir})",
        file=sys.stderr,
    )
    return process


def _environment(plan: LoadPlan) -> dict[str, str]:
    env = dict(os.environ)
    env.update(environment(plan.options))
    env[PARENT_PID_ENV] = str(os.getpid())  # the children stop when this process is gone
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _base_command() -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--loglevel", "WARNING"]


def _master_command(plan: LoadPlan, master_port: int) -> list[str]:
    command = _base_command()
    if plan.stop_timeout_s:
        command += ["--stop-timeout", f"{plan.stop_timeout_s:g}"]
    if plan.options.csv_prefix:
        command += ["--csv", plan.options.csv_prefix]
    if plan.headless:  # --only-summary: no periodic table; the final ones go unless --locust-stats (runner/events.py)
        command += ["--headless"] if plan.options.locust_stats else ["--headless", "--only-summary"]
    else:
        command += ["--web-host", "127.0.0.1", "--web-port", str(plan.web_port)]
    if plan.workers:
        command += [
            "--master",
            "--expect-workers",
            str(plan.workers),
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
        ]
    return command


def _spawn(command: Sequence[str], env: dict[str, str], death_signal: int = signal.SIGTERM) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(command), env=env, start_new_session=True, preexec_fn=die_with_parent(os.getpid(), death_signal)
    )


def _stop(processes: Sequence[subprocess.Popen[bytes]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _latest_results(directory: Path, not_before: float, snapshots: bool = True) -> tuple[Results, Path] | None:
    """The results this run wrote: those ``latest.txt`` names (in ``directory``, else in its fallback, where
    a master writes when ``directory`` stopped taking files), else, only when the master was killed before its
    final write (``snapshots``), the newest snapshot written since the start, which says ``snapshot``."""
    for where in (directory, fallback_dir(directory)):
        marker = where / "latest.txt"
        if marker.is_file() and marker.stat().st_mtime >= not_before - 1:
            path = where / marker.read_text(encoding="utf-8").strip()
            return load_results(path), path
    if not snapshots:
        return None  # the master ended on its own without final results: an older snapshot is not the outcome
    found = [p for p in directory.glob("*.json") if p.stat().st_mtime >= not_before - 1] if directory.is_dir() else []
    if not found:
        return None
    path = max(found, key=lambda p: p.stat().st_mtime)
    return load_results(path), path


def _print_summary(results: Results, path: Path, results_dir: Path) -> None:
    from attnload.report.console import print_summary

    print_summary(results)
    html = path.with_suffix(".html")
    print(f"results: {path}" + (f"\nreport:  {html}" if html.exists() else ""))
    if path.parent != results_dir and path.parent == fallback_dir(results_dir):
        print(
            f"attnload run: warning: {results_dir} stopped taking files during the run: the results were written "
            f"to {path.parent} instead",
            file=sys.stderr,
        )
