"""A local Prometheus for a laptop run: scrapes the master (and the simulator), loads the rules.

``attnload run --prometheus`` calls :func:`start_local_prometheus`; ``python -m
attnload.dashboards.prometheus`` runs one in the foreground (``make observe``) so Grafana
can be pointed at it. It runs the system's ``/usr/bin/prometheus`` (Debian package)
with a config written into ``data_dir``; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

PROMETHEUS_BIN = "/usr/bin/prometheus"
DEFAULT_PORT = 9090
READY_TIMEOUT_S = 30.0


class PrometheusError(RuntimeError):
    """Prometheus could not be started (binary missing, bad config, port taken, not ready in time)."""


def default_rules_file() -> Path | None:
    """``grafana/prometheus/rules.yml`` of the source checkout, if this module runs from one."""
    path = Path(__file__).resolve().parents[3] / "grafana" / "prometheus" / "rules.yml"
    return path if path.is_file() else None


def prometheus_binary() -> str | None:
    """The Prometheus server to run: ``$ATTNLOAD_PROMETHEUS_BIN``, /usr/bin/prometheus, or PATH."""
    explicit = os.environ.get("ATTNLOAD_PROMETHEUS_BIN")
    if explicit:
        return explicit
    if Path(PROMETHEUS_BIN).is_file():
        return PROMETHEUS_BIN
    return shutil.which("prometheus")


def write_config(
    scrape_targets: Mapping[str, str], data_dir: Path, *, scrape_interval_s: float = 5.0, rules_file: Path | None = None
) -> Path:
    """Write ``prometheus.yml`` (job name → ``host:port``) into ``data_dir`` and return its path.

    The rules are copied next to it so the config stays valid if the checkout moves.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    interval = f"{max(1, round(scrape_interval_s * 1000))}ms"
    config: dict[str, object] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in scrape_targets.items()
        ],
    }
    if rules_file is not None:
        shutil.copyfile(rules_file, data_dir / "rules.yml")
        config["rule_files"] = ["rules.yml"]
    path = data_dir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:  # noqa: S310 (local URL we built)
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_local_prometheus(
    scrape_targets: dict[str, str],
    data_dir: Path,
    port: int = DEFAULT_PORT,
    *,
    scrape_interval_s: float = 5.0,
    rules_file: Path | None = None,
    host: str = "127.0.0.1",
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> subprocess.Popen[bytes]:
    """Start Prometheus on ``host:port`` scraping ``scrape_targets``; return once ``/-/ready`` answers.

    ``rules_file`` defaults to the checkout's ``grafana/prometheus/rules.yml`` when there is
    one. The process logs to ``data_dir/prometheus.log``; on any failure it is stopped and
    :class:`PrometheusError` carries the log's tail, so a bad flag or a taken port is visible.
    """
    binary = prometheus_binary()
    if binary is None:
        raise PrometheusError("prometheus not found: apt-get install prometheus (or set ATTNLOAD_PROMETHEUS_BIN)")
    rules = rules_file if rules_file is not None else default_rules_file()
    config = write_config(scrape_targets, data_dir, scrape_interval_s=scrape_interval_s, rules_file=rules)
    log_path = data_dir / "prometheus.log"
    command = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir / 'tsdb'}",
        f"--web.listen-address={host}:{port}",
        "--storage.tsdb.retention.time=7d",
        "--web.enable-admin-api",
    ]
    with log_path.open("ab") as log_file:
        # own process group: Ctrl-C in the terminal reaches us, and we stop Prometheus in order
        process = subprocess.Popen(
            command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PrometheusError(f"prometheus exited with {process.returncode}: {_tail(log_path)}")
        if _ready(f"http://{host}:{port}/-/ready"):
            log.info(
                "prometheus on http://%s:%d scraping %s",
                host,
                port,
                ", ".join(f"{job}={target}" for job, target in scrape_targets.items()),
            )
            return process
        time.sleep(0.2)
    stop_prometheus(process)
    raise PrometheusError(f"prometheus not ready on {host}:{port} after {ready_timeout_s:.0f}s: {_tail(log_path)}")


def stop_prometheus(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM (Prometheus flushes its head block), then SIGKILL after ``timeout_s``."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return " | ".join(path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def main(argv: Sequence[str] | None = None) -> int:
    """Foreground Prometheus for ``make observe``: runs until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m attnload.dashboards.prometheus",
        description="Run a local Prometheus scraping the attnload master and sim.",
    )
    parser.add_argument("--master", default="127.0.0.1:9646", help="master metrics host:port (%(default)s)")
    parser.add_argument("--sim", default="127.0.0.1:8000", help="simulator host:port, '' to skip (%(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="Prometheus port (%(default)s)")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(".attnload-prometheus"), help="config and TSDB directory (%(default)s)"
    )
    parser.add_argument("--scrape-interval", type=float, default=5.0, help="seconds (%(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    targets = {"attnload": args.master}
    if args.sim:
        targets["attnload-sim"] = args.sim
    try:
        process = start_local_prometheus(targets, args.data_dir, args.port, scrape_interval_s=args.scrape_interval)
    except PrometheusError as exc:
        print(f"attnload observe: error: {exc}", file=sys.stderr)
        return 2
    print(f"Prometheus: http://127.0.0.1:{args.port}  (Grafana datasource URL; Ctrl-C stops it)")
    try:
        return process.wait() or 0
    except KeyboardInterrupt:
        return 0
    finally:
        stop_prometheus(process)


if __name__ == "__main__":
    sys.exit(main())
