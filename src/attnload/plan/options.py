"""Run options, spelled once: :data:`OPTIONS` generates the ``attnload run`` flags, the ``ATTNLOAD_*``
environment the launcher hands to Locust, and the ``--attnload-*`` options Locust parses (each
mirrored by its environment variable for containers).

An option named ``stage-duration`` is ``--stage-duration`` for ``attnload run``,
``--attnload-stage-duration`` for plain Locust and ``ATTNLOAD_STAGE_DURATION`` in the environment.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from attnload.errors import UsageError, redact
from attnload.plan import values
from attnload.plan.values import (
    flag_text,
    parse_start_spread,
    server_metrics_interval,
    server_metrics_mode,
    truthy,
    users_arg,
)
from attnload.workload.abandon import AbandonSpec, parse_abandon
from attnload.workload.arrivals import parse_burstiness
from attnload.workload.shapes import ShapeSpec, parse_duration, parse_shape, shape_help

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
    ladder_stretch: str = "auto"
    """``auto``: a context ladder's rung whose TTFT is long runs longer (``runner/stretch.py``); ``off``: not."""
    keep_going: bool = False
    """``--keep-going``: a model failing one deterministic way 20 times in a row keeps sending (giveup.py)."""
    given: Mapping[str, str] = field(default_factory=dict, compare=False)
    """The texts these options were read from, by option name: what ``attnload run`` hands its processes."""


@dataclass(frozen=True)
class Option:
    """One run option, declared once: its ``attnload run`` flag (``run``: argparse keywords; None: declared
    elsewhere, e.g. ``-c/--config``), its Locust ``--attnload-*`` option (``locust``), its ``ATTNLOAD_*``
    variable, and the :class:`RunOptions` field it fills (``field``, by ``read`` from its text; bad text is a
    one-line usage error on both sides). ``check`` validates an option no field holds (the process that acts
    on it reads it), for ``attnload run`` before any process starts."""

    name: str
    help: str
    locust_default: Any = ""
    locust_type: type = str
    run: Mapping[str, Any] | None = field(default_factory=dict)
    locust: bool = True
    aliases: tuple[str, ...] = ()
    """More ``attnload run`` spellings, listed before the canonical one (Locust's ``-u``, ``-t/--run-time``)."""
    field: str | None = None
    """The :class:`RunOptions` field ``read`` fills (None: the option is read where it acts)."""
    read: Callable[[Any], Any] | None = None
    check: Callable[[Any], Any] | None = None
    child: bool | None = None
    """Whether ``attnload run`` hands it to the Locust processes (None: when Locust parses it)."""
    from_env: bool = False
    """``attnload run`` takes the ``ATTNLOAD_*`` variable when the flag is not given."""
    launch_default: str | None = None
    """The text ``attnload run`` hands on when neither flag nor variable gives one (None: nothing)."""

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

    @property
    def dest(self) -> str:
        """The argparse attribute of the ``attnload run`` flag."""
        return self.name.replace("-", "_")

    @property
    def locust_dest(self) -> str:
        """The attribute of Locust's parsed options (``attnload_`` + :attr:`dest`)."""
        return "attnload_" + self.dest

    @property
    def handed_on(self) -> bool:
        return self.locust if self.child is None else self.child

    def given_text(self, flags: Mapping[str, Any]) -> str | None:
        """What ``attnload run`` hands on for this option: the flag, else (``from_env``) the variable,
        else :attr:`launch_default`; None: nothing (a Locust process then takes its own default)."""
        value = flags.get(self.dest, (self.run or {}).get("default"))
        if value is None and self.from_env:
            value = os.environ.get(self.env)
        if value is None:
            return self.launch_default
        if self.read is truthy:
            value = truthy(value)
        return flag_text(value)


OPTIONS: tuple[Option, ...] = (
    Option(
        "config",
        "test config (.json or .toml)",
        "examples/benchmark_config.json",
        run=None,
        field="config_path",
        read=str,
    ),
    Option(
        "users",
        "closed-loop users (with -t/--run-time); with --shape context:LIST, one count or a list (1,8,32: a grid)",
        run={"type": users_arg, "default": None},
        locust=False,
        aliases=("-u",),
    ),
    Option(
        "spawn-rate",
        "users started per second",
        run={"type": float, "default": None},
        locust=False,
        aliases=("-r",),
        child=True,
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
        shape_help(),
        run={"default": None},
    ),
    Option("stage-duration", "length of each --shape stage (default 60s)", "60s", run={"default": None}),
    Option(
        "replay-speed", "replay:PATH shapes: trace speed-up (2 = twice the rate; default 1)", "1", run={"default": None}
    ),
    Option(
        "warmup",
        "seconds at each stage start excluded from stage stats",
        "0",
        run={"default": "0"},
        field="warmup_s",
        read=values.warmup,
    ),
    Option(
        "start-spread",
        "closed loop: spread each stage's new users' first requests so users started together "
        "do not stay in phase. auto (default): over about one request's duration (the first stage: one pilot "
        "user per model starts at once, the others at golden-ratio offsets of its duration); off: start at "
        "once; SECONDS: over that fixed time",
        "auto",
        run={"default": None, "metavar": "auto|off|S"},
        field="start_spread",
        read=parse_start_spread,
        from_env=True,
    ),
    Option(
        "profile",
        "comma-separated workload profiles (default: all)",
        run={"default": ""},
        field="profiles",
        read=values.profiles,
    ),
    Option(
        "paired",
        "send each prompt to every model at once; results get per-pair deltas with a CI",
        "0",
        run={"action": "store_true"},
        field="paired",
        read=truthy,
        launch_default="0",
    ),
    Option(
        "arrivals",
        "open-loop arrival law for rate stages: poisson or constant (default: the config's)",
        run={"choices": ("poisson", "constant"), "default": None},
        field="arrivals",
        read=values.arrivals,
        launch_default="",
    ),
    Option(
        "burstiness",
        "rate stages: gamma inter-arrival shape B over the whole fleet (1 = Poisson, 0.25 = "
        "bursty, CV 1/sqrt(B)); default: the --arrivals law",
        run={"default": None, "metavar": "B"},
        field="burstiness",
        read=parse_burstiness,
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
        field="max_in_flight",
        read=values.max_in_flight,
    ),
    Option(
        "results",
        "directory for results JSON + HTML",
        "results",
        run={"default": "results"},
        field="results_dir",
        read=str,
    ),
    Option(
        "metrics-port",
        "master's Prometheus /metrics port (0 = off)",
        9646,
        int,
        run={"type": int, "default": 9646},
        field="metrics_port",
        read=int,
    ),
    Option(
        "metrics-host",
        "address /metrics listens on (default 127.0.0.1; 0.0.0.0 lets another host's "
        "Prometheus scrape it, as deploy/ does)",
        "127.0.0.1",
        run={"default": "127.0.0.1", "metavar": "ADDR"},
        field="metrics_host",
        read=lambda text: str(text or "127.0.0.1").strip(),
    ),
    Option(
        "server-metrics",
        "auto: read each model server's /metrics (its metrics_url, else /metrics on its "
        "base_url's host) next to the client's numbers; off: don't",
        "auto",
        run={"choices": ("auto", "off"), "default": "auto"},
        field="server_metrics",
        read=server_metrics_mode,
    ),
    Option(
        "server-metrics-interval",
        "seconds between scrapes of the model servers' /metrics",
        "2",
        run={"default": "2", "metavar": "S"},
        field="server_metrics_interval_s",
        read=server_metrics_interval,
    ),
    Option(
        "gpu-metrics",
        "auto: read each model's GPUs from dcgm-exporter (its gpu_metrics_url + gpu_selector, "
        "else DCGM_FI_* series on the model server's /metrics, as the simulator serves) at the server-metrics "
        "interval; off: don't",
        "auto",
        run={"choices": ("auto", "off"), "default": "auto"},
        field="gpu_metrics",
        read=values.gpu_metrics_mode,
    ),
    Option(
        "ladder-stretch",
        "auto: a context ladder's rung whose TTFT p50 is over a third of it runs one more --stage-duration, up to "
        "4 times its length (its requests would be cut before they finish); off: keep the stage duration",
        "auto",
        run={"choices": ("auto", "off"), "default": "auto"},
        field="ladder_stretch",
        read=lambda text: values.server_metrics_mode(text, "--ladder-stretch"),
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
        field="csv_prefix",
        read=values.text_or_none,
    ),
    Option(
        "locust-stats",
        "also print Locust's own request tables (periodic stats and the final response-time "
        "percentiles, of whole streamed requests); off by default, attnload's tables and progress line stay",
        "1",
        run={"action": "store_true", "default": None},
        field="locust_stats",
        read=truthy,
        from_env=True,
        launch_default="0",
    ),
    Option(
        "requests-out",
        "also write one JSON line per request to PATH (gzip when it ends in .gz; schema in docs/requests.md)",
        "",
        run={"default": None, "metavar": "PATH"},
        from_env=True,
    ),
    Option(
        "restart-lost-users",
        "when a worker is lost, start its users again on the remaining workers (default off: the "
        "stage runs on with the users that are left, and results say so)",
        "0",
        run={"action": "store_true", "default": None},
        field="restart_lost_users",
        read=truthy,
    ),
    Option(
        "accept-foreign-workers",
        "let a joining worker whose config hash or attnload version differs from the master's take part "
        "(default: refused with a warning, its reports never merged)",
        "0",
        run={"action": "store_true", "default": None},
        field="accept_foreign_workers",
        read=truthy,
    ),
    Option(
        "keep-going",
        "keep sending to a model whose requests fail one way that retrying cannot fix (not_found, auth, "
        "bad_request, context_length, proxy_auth) 20 times in a row with no success (default: its users stop, "
        "with the fix on the console, and the run exits 1)",
        "0",
        run={"action": "store_true", "default": None},
        field="keep_going",
        read=truthy,
    ),
    Option(
        "snapshot-interval",
        "seconds between atomic snapshots of the results during the run, so a killed "
        "master loses at most that (0 = off)",
        30.0,
        float,
        run={"type": float, "default": None, "metavar": "S"},
        check=values.snapshot_interval,
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


def environment(options: RunOptions) -> dict[str, str]:
    """The ``ATTNLOAD_*`` variables that hand ``options`` to the Locust processes (those they read)."""
    return {OPTION[name].env: text for name, text in options.given.items() if OPTION[name].handed_on}


def launch_texts(flags: Mapping[str, Any]) -> dict[str, str]:
    """The option texts of an ``attnload run`` command line (its namespace by attribute), checked: each
    option's flag, else its variable where it takes one, else the launcher's default; absent ones left out."""
    texts: dict[str, str] = {}
    for option in OPTIONS:
        text = option.given_text(flags)
        if text is None:
            continue
        if option.check is not None:
            option.check(text)
        texts[option.name] = text
    return texts


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


def with_shape(texts: Mapping[str, str], shape: ShapeSpec) -> dict[str, str]:
    """``texts`` with the planned shape's own: the shape (``--users``, ``--duration`` and the config's
    ``shape`` folded in), its stage length and a replay's speed, as every process parses them."""
    planned = {k: v for k, v in texts.items() if k != "replay-speed"}
    planned.update({"shape": shape.to_text(), "stage-duration": f"{shape.stage_duration_s:g}"})
    if shape.replay_speed is not None:
        planned["replay-speed"] = f"{shape.replay_speed:g}"
    return planned


def options_from(parsed: Any) -> RunOptions:
    """A Locust process's options, from its parsed ``--attnload-*`` options (each mirrored by its variable)
    and Locust's own ``--csv``."""
    given = vars(parsed)
    texts = {o.name: given.get(o.locust_dest) for o in OPTIONS if o.locust}
    return run_options({**texts, "csv": given.get("csv_prefix")})


def run_options(texts: Mapping[str, Any], shape: ShapeSpec | None = None) -> RunOptions:
    """The options the texts by option name say (a missing one: its Locust default), each read by its own
    reader; the one parser of both ``attnload run`` and the Locust processes (``shape``: already parsed)."""

    def text(name: str) -> Any:
        value = texts.get(name)
        return OPTION[name].locust_default if value is None else value

    read = {o.field: o.read(text(o.name)) for o in OPTIONS if o.field and o.read}
    shape_text = str(text("shape") or "").strip()
    if shape is None and shape_text:
        stage_s = parse_duration(text("stage-duration"), "--stage-duration")
        shape = parse_shape(shape_text, stage_s, texts.get("replay-speed"))
    return RunOptions(
        shape=shape,
        abandon=parse_abandon(texts.get("abandon-rate"), texts.get("abandon-after")),
        requests_out=resolve_requests_out(texts.get("requests-out"), text("results")),
        given={name: str(value) for name, value in texts.items() if value is not None},
        **read,
    )


def requests_out_option(parsed: Any) -> str | None:
    """``--attnload-requests-out`` as a path; a relative one lands in the results directory (a container's
    volume). ``attnload run`` hands its children an absolute path, resolved where it was typed."""
    return resolve_requests_out(parsed.attnload_requests_out, parsed.attnload_results)


def resolve_requests_out(path: object, results: object) -> str | None:
    """The per-request file's path: as given when absolute, else inside the results directory."""
    text = str(path or "").strip()
    if not text:
        return None
    return text if os.path.isabs(text) else os.path.join(str(results or "results"), text)


def env_value(name: str) -> str:
    """An option's value from its environment variable, read before Locust parses (the load shape)."""
    option = OPTION[name]
    return os.environ.get(option.env, str(option.locust_default)).strip()


def exit_usage(exc: UsageError) -> None:
    print(f"attnload: error: {redact(str(exc))}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(2)  # Locust's init hooks run under gevent: exit now, one line, no traceback
