"""Run options, spelled once: :data:`OPTIONS` generates the ``attnload run`` flags, the ``ATTNLOAD_*``
environment the launcher hands to Locust, and the ``--attnload-*`` options Locust parses (each
mirrored by its environment variable for containers).

An option named ``stage-duration`` is ``--stage-duration`` for ``attnload run``,
``--attnload-stage-duration`` for plain Locust and ``ATTNLOAD_STAGE_DURATION`` in the environment.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from attnload.errors import UsageError, redact
from attnload.workload.abandon import AbandonSpec, parse_abandon
from attnload.workload.arrivals import parse_burstiness
from attnload.workload.shapes import ShapeSpec, parse_duration, parse_shape

DEFAULT_MAX_IN_FLIGHT = 1024
"""Per model and worker: keep-alive connections the open loop's pool may open before requests wait.

By Little's law a stage needs rate × request duration connections; a cap below that turns
into dispatch lag (flagged ``client_behind``), so the default is generous (``attnload run`` raises
the open-files limit) and ``--max-in-flight`` lowers it on purpose."""


@dataclass(frozen=True)
class RunOptions:
    """What the Locust command line / environment asked for (see :func:`add_arguments`)."""

    config_path: str
    metrics_port: int = 9646
    metrics_host: str = "127.0.0.1"
    """Where /metrics listens: loopback unless asked (a container's master sets 0.0.0.0 for Prometheus)."""
    results_dir: str = "results"
    shape: ShapeSpec | None = None
    profiles: tuple[str, ...] = ()
    warmup_s: float = 0.0
    paired: bool = False
    """Send each prompt to every model at once (``--paired``)."""
    arrivals: str | None = None
    """Open-loop arrival law; None: the config's ``arrivals``."""
    burstiness: float | None = None
    """``--burstiness``: gamma inter-arrival shape of rate stages (None: the ``arrivals`` law)."""
    abandon: AbandonSpec | None = None
    """``--abandon-rate``/``--abandon-after``: which requests close their stream early, and when."""
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    server_metrics: str = "auto"
    """``auto``: the master scrapes each model server's /metrics; ``off``: it does not."""
    server_metrics_interval_s: float = 2.0
    gpu_metrics: str = "auto"
    """``auto``: the master reads each model's GPUs (gpu_metrics_url, else the server's /metrics); ``off``: not."""
    csv_prefix: str | None = None
    """Locust's own ``--csv PREFIX``: the master also writes ``PREFIX_llm.csv`` with the results."""
    locust_stats: bool = True
    """Locust's own request tables on the console; ``attnload run`` turns them off unless ``--locust-stats``."""
    requests_out: str | None = None
    """``--requests-out PATH``: the master (or single process) writes one JSON line per request there."""
    start_spread: str | float = "auto"
    """``auto``, ``off`` or seconds: how new closed-loop users' first requests are spread
    (``runner/sender/startspread.py``)."""
    restart_lost_users: bool = False
    """``--restart-lost-users``: a lost worker's users start again on the workers left."""
    accept_foreign_workers: bool = False
    """``--accept-foreign-workers``: admit a joining worker whose config hash or version differs."""


def users_arg(text: str) -> int | str:
    """``--users``: a whole number, or (for a context ladder's grid) the list as given, checked by the planner."""
    try:
        return int(text)
    except ValueError:
        return text.strip()


@dataclass(frozen=True)
class Option:
    """One run option. ``run`` holds the argparse keywords of its ``attnload run`` flag (None: the
    flag is declared elsewhere, e.g. ``-c/--config``); ``locust`` says whether Locust parses it."""

    name: str
    help: str
    locust_default: Any = ""
    locust_type: type = str
    run: Mapping[str, Any] | None = field(default_factory=dict)
    locust: bool = True
    aliases: tuple[str, ...] = ()
    """More ``attnload run`` spellings, listed before the canonical one (Locust's ``-u``, ``-t/--run-time``)."""

    @property
    def env(self) -> str:
        return "ATTNLOAD_" + self.name.upper().replace("-", "_")

    @property
    def run_flag(self) -> str:
        return "--" + self.name

    @property
    def locust_flag(self) -> str:
        return "--attnload-" + self.name

    @property
    def run_flags(self) -> tuple[str, ...]:
        return (*self.aliases, self.run_flag)


OPTIONS: tuple[Option, ...] = (
    Option("config", "test config (.json or .toml)", "examples/benchmark_config.json", run=None),
    Option(
        "users",
        "closed-loop users (with -t/--run-time); with --shape context:LIST, one count or a list (1,8,32: a grid)",
        run={"type": users_arg, "default": None},
        locust=False,
        aliases=("-u",),
    ),
    Option(
        "spawn-rate", "users started per second", run={"type": float, "default": None}, locust=False, aliases=("-r",)
    ),
    Option(
        "duration",
        "run length for --users, e.g. 60s or 2m (Locust's -t/--run-time)",
        run={"default": None},
        locust=False,
        aliases=("-t", "--run-time"),
    ),
    Option(
        "shape",
        "concurrency:1,8,64 (users per stage), rate:0.5,1,2 (req/s per model), sweep[:CAP] or replay:TRACE",
        run={"default": None},
    ),
    Option("stage-duration", "length of each --shape stage (default 60s)", "60s", run={"default": None}),
    Option(
        "replay-speed", "replay:PATH shapes: trace speed-up (2 = twice the rate; default 1)", "1", run={"default": None}
    ),
    Option("warmup", "seconds at each stage start excluded from stage stats", "0", run={"default": "0"}),
    Option(
        "start-spread",
        "closed loop: spread each stage's new users' first requests so users started together "
        "do not stay in phase. auto (default): over about one request's duration (the first stage: one pilot "
        "user per model starts at once, the others at golden-ratio offsets of its duration); off: start at "
        "once; SECONDS: over that fixed time",
        "auto",
        run={"default": None, "metavar": "auto|off|S"},
    ),
    Option("profile", "comma-separated workload profiles (default: all)", run={"default": ""}),
    Option(
        "paired",
        "send each prompt to every model at once; results get per-pair deltas with a CI",
        "0",
        run={"action": "store_true"},
    ),
    Option(
        "arrivals",
        "open-loop arrival law for rate stages: poisson or constant (default: the config's)",
        run={"choices": ("poisson", "constant"), "default": None},
    ),
    Option(
        "burstiness",
        "rate stages: gamma inter-arrival shape B over the whole fleet (1 = Poisson, 0.25 = "
        "bursty, CV 1/sqrt(B)); default: the --arrivals law",
        run={"default": None, "metavar": "B"},
    ),
    Option(
        "abandon-rate",
        "fraction 0-1 of streamed requests (seeded) that close the connection mid-stream "
        "(counted abandoned, not failed)",
        run={"default": None, "metavar": "P"},
    ),
    Option(
        "abandon-after",
        "when an abandoning request closes: content chunks (5), a duration (2s) or a "
        "distribution (uniform:2,10, exp:5, uniform:1s,3s)",
        run={"default": None, "metavar": "SPEC"},
    ),
    Option(
        "max-in-flight",
        "open loop: keep-alive connections per model and worker before requests wait",
        DEFAULT_MAX_IN_FLIGHT,
        int,
        run={"type": int, "default": None},
    ),
    Option("results", "directory for results JSON + HTML", "results", run={"default": "results"}),
    Option(
        "metrics-port", "master's Prometheus /metrics port (0 = off)", 9646, int, run={"type": int, "default": 9646}
    ),
    Option(
        "metrics-host",
        "address /metrics listens on (default 127.0.0.1; 0.0.0.0 lets another host's "
        "Prometheus scrape it, as deploy/ does)",
        "127.0.0.1",
        run={"default": "127.0.0.1", "metavar": "ADDR"},
    ),
    Option(
        "server-metrics",
        "auto: read each model server's /metrics (its metrics_url, else /metrics on its "
        "base_url's host) next to the client's numbers; off: don't",
        "auto",
        run={"choices": ("auto", "off"), "default": "auto"},
    ),
    Option(
        "server-metrics-interval",
        "seconds between scrapes of the model servers' /metrics",
        "2",
        run={"default": "2", "metavar": "S"},
    ),
    Option(
        "gpu-metrics",
        "auto: read each model's GPUs from dcgm-exporter (its gpu_metrics_url + gpu_selector, "
        "else DCGM_FI_* series on the model server's /metrics, as the simulator serves) at the server-metrics "
        "interval; off: don't",
        "auto",
        run={"choices": ("auto", "off"), "default": "auto"},
    ),
    Option(
        "ladder-stretch",
        "auto: a context ladder's rung whose TTFT p50 is over a third of it runs one more --stage-duration, up to "
        "4 times its length (its requests would be cut before they finish); off: keep the stage duration",
        "auto",
        run={"choices": ("auto", "off"), "default": "auto"},
    ),
    Option(
        "exit-code-on-error",
        "exit status when any request failed, as Locust's (default 1; 0: ignore failures)",
        run={"type": int, "default": 1, "metavar": "N"},
        locust=False,
    ),
    Option(
        "fail-on",
        "also exit 1 when, comma-separated: slo (a model's p99 over the config's slo), saturated "
        "(client_saturated), server-gap (a stage flagged server_client_gap), worker-lost (a worker went "
        "missing and never came back), no-data (a stage that finished no request; a model that finished none "
        "always exits 1)",
        run={"default": "", "metavar": "REASONS"},
        locust=False,
    ),
    Option(
        "csv",
        "write Locust's CSV stats (PREFIX_stats.csv, _stats_history.csv, _failures.csv, "
        "_exceptions.csv) plus PREFIX_llm.csv (TTFT/ITL/TPOT/tok/s per model and stage)",
        run={"default": None, "metavar": "PREFIX"},
        locust=False,
    ),
    Option(
        "locust-stats",
        "also print Locust's own request tables (periodic stats and the final response-time "
        "percentiles, of whole streamed requests); off by default, attnload's tables and progress line stay",
        "1",
        run={"action": "store_true", "default": None},
    ),
    Option(
        "requests-out",
        "also write one JSON line per request to PATH (gzip when it ends in .gz; schema in docs/requests.md)",
        "",
        run={"default": None, "metavar": "PATH"},
    ),
    Option(
        "restart-lost-users",
        "when a worker is lost, start its users again on the remaining workers (default off: the "
        "stage runs on with the users that are left, and results say so)",
        "0",
        run={"action": "store_true", "default": None},
    ),
    Option(
        "accept-foreign-workers",
        "let a joining worker whose config hash or attnload version differs from the master's take part "
        "(default: refused with a warning, its reports never merged)",
        "0",
        run={"action": "store_true", "default": None},
    ),
    Option(
        "snapshot-interval",
        "seconds between atomic snapshots of the results during the run, so a killed "
        "master loses at most that (0 = off)",
        30.0,
        float,
        run={"type": float, "default": None, "metavar": "S"},
    ),
)
"""Every option the launcher passes to Locust processes; the order is ``attnload run --help``'s."""

OPTION = {option.name: option for option in OPTIONS}


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``attnload run`` flags: the table's, then those of the process layout."""
    for option in OPTIONS:
        if option.run is not None:
            parser.add_argument(*option.run_flags, dest=option.name.replace("-", "_"), help=option.help, **option.run)
    parser.add_argument(
        "--workers",
        "--processes",
        dest="workers",
        type=int,
        default=0,
        help="local Locust worker processes (0 = one process; -1 = one per CPU core, as Locust's --processes)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--headless", dest="headless", action="store_true", default=True, help="no web UI (default)")
    mode.add_argument("--web", dest="headless", action="store_false", help="Locust web UI on --web-port")
    parser.add_argument("--web-port", type=int, default=8089, help="Locust web UI port with --web")
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=0.0,
        metavar="S",
        help="at the end (and when users are removed) let in-flight requests finish for up to S "
        "seconds instead of counting them cancelled",
    )
    parser.add_argument(
        "--prometheus",
        type=int,
        nargs="?",
        const=9090,
        default=None,
        metavar="PORT",
        help="also run a local Prometheus (Debian package) on PORT (9090) scraping the master "
        "and a simulator on a loopback base_url; its data stays under RESULTS/prometheus",
    )


def environment(values: Mapping[str, str | None]) -> dict[str, str]:
    """``ATTNLOAD_*`` variables for option values by name (None: not set)."""
    return {OPTION[name].env: value for name, value in values.items() if value is not None}


def add_arguments(parser: Any) -> None:
    """Locust's ``--attnload-*`` options (``init_command_line_parser``), each with its env var."""
    group = parser.add_argument_group("attnload")
    for option in OPTIONS:
        if option.locust:
            group.add_argument(
                option.locust_flag,
                env_var=option.env,
                type=option.locust_type,
                default=option.locust_default,
                help=option.help,
            )


def options_from(parsed: Any) -> RunOptions:
    shape_text = (parsed.attnload_shape or "").strip()
    stage_s = parse_duration(parsed.attnload_stage_duration, "--stage-duration")
    warmup = str(parsed.attnload_warmup).strip()
    shape = parse_shape(shape_text, stage_s, getattr(parsed, "attnload_replay_speed", None)) if shape_text else None
    return RunOptions(
        config_path=parsed.attnload_config,
        metrics_port=int(parsed.attnload_metrics_port),
        metrics_host=str(parsed.attnload_metrics_host or "127.0.0.1").strip(),
        results_dir=parsed.attnload_results,
        shape=shape,
        profiles=tuple(p.strip() for p in (parsed.attnload_profile or "").split(",") if p.strip()),
        warmup_s=0.0 if warmup in ("", "0") else parse_duration(warmup, "--warmup"),
        paired=str(parsed.attnload_paired).strip().lower() in ("1", "true", "yes"),
        arrivals=_arrivals(parsed.attnload_arrivals),
        burstiness=parse_burstiness(getattr(parsed, "attnload_burstiness", None)),
        abandon=parse_abandon(
            getattr(parsed, "attnload_abandon_rate", None), getattr(parsed, "attnload_abandon_after", None)
        ),
        max_in_flight=max(1, int(parsed.attnload_max_in_flight)),
        server_metrics=server_metrics_mode(parsed.attnload_server_metrics),
        server_metrics_interval_s=server_metrics_interval(parsed.attnload_server_metrics_interval),
        gpu_metrics=server_metrics_mode(getattr(parsed, "attnload_gpu_metrics", "auto"), "--gpu-metrics"),
        csv_prefix=getattr(parsed, "csv_prefix", None) or None,
        locust_stats=truthy(getattr(parsed, "attnload_locust_stats", "1")),
        requests_out=requests_out_option(parsed),
        start_spread=parse_start_spread(getattr(parsed, "attnload_start_spread", "auto")),
        restart_lost_users=truthy(getattr(parsed, "attnload_restart_lost_users", "0")),
        accept_foreign_workers=truthy(getattr(parsed, "attnload_accept_foreign_workers", "0")),
    )


def truthy(value: object) -> bool:
    """An on/off option's value: ``1``/``true``/``yes``/``on`` (any case) is on."""
    return str(value if value is not None else "").strip().lower() in ("1", "true", "yes", "on")


def requests_out_option(parsed: Any) -> str | None:
    """``--attnload-requests-out`` as a path; a relative one lands in the results directory (a container's
    volume). ``attnload run`` hands its children an absolute path, resolved where it was typed."""
    text = str(getattr(parsed, "attnload_requests_out", "") or "").strip()
    if not text:
        return None
    return text if os.path.isabs(text) else os.path.join(str(parsed.attnload_results or "results"), text)


def server_metrics_mode(text: str | None, flag: str = "--server-metrics") -> str:
    value = (text or "auto").strip().lower()
    if value not in ("auto", "off"):
        raise UsageError(f"{flag} {text!r}: use auto or off")
    return value


def server_metrics_interval(text: str | float | None) -> float:
    """Seconds between scrapes: a positive number (``2``, ``0.5``) or a duration (``2s``)."""
    raw = str(text if text is not None else "2").strip()
    try:
        value = float(raw)
    except ValueError:
        value = parse_duration(raw, "--server-metrics-interval")
    if not 0.1 <= value <= 3600:
        raise UsageError(f"--server-metrics-interval {raw}: use 0.1 to 3600 seconds (default 2)")
    return value


def parse_start_spread(text: str | float | None, spelled: str = "--start-spread") -> str | float:
    """``auto`` (default), ``off`` or a positive number of seconds (``2`` or ``2s``)."""
    raw = str(text if text is not None else "auto").strip().lower()
    if raw in ("", "auto"):
        return "auto"
    if raw in ("off", "0", "0s", "none"):
        return "off"
    try:
        value = float(raw[:-1] if raw.endswith("s") else raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0.1 <= value <= 3600:
        raise UsageError(f"{spelled} {text}: use auto, off, or 0.1 to 3600 seconds (e.g. 3 or 3s)")
    return value


def env_value(name: str) -> str:
    """An option's value from its environment variable, read before Locust parses (the load shape)."""
    option = OPTION[name]
    return os.environ.get(option.env, str(option.locust_default)).strip()


def _arrivals(text: str | None) -> str | None:
    value = (text or "").strip().lower()
    if value and value not in ("poisson", "constant"):
        raise UsageError(f"--arrivals {text!r}: use poisson or constant")
    return value or None


def exit_usage(exc: UsageError) -> None:
    print(f"attnload: error: {redact(str(exc))}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(2)  # Locust's init hooks run under gevent: exit now, one line, no traceback
