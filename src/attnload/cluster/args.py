"""The arguments of ``attnload cluster``, apart from the code that drives the cluster: ``attnload cluster
--help`` and argument errors answer without the Kubernetes client (``attnload[cluster]``) installed."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnload.cluster import manifests


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for readiness (300)")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    up = sub.add_parser("up", help="apply deploy/ and wait until every Deployment is ready")
    up.add_argument(
        "--manifests",
        type=Path,
        help="manifest directory (default: ./deploy when present, else the copy packaged with attnload, "
        "else the checkout's deploy/ (an editable install))",
    )
    up.add_argument("--image", help=f"image for master, workers and sim (default {manifests.ATTNLOAD_IMAGE})")
    up.add_argument("--workers", type=_non_negative, help="worker replicas (default: the manifest's)")
    up.add_argument(
        "--config",
        help="config file name in the attnload-config ConfigMap "
        "(default k8s_sim_config.json: the in-cluster simulator)",
    )
    up.add_argument("--shape", help="ATTNLOAD_SHAPE, e.g. concurrency:8,32,128")
    up.add_argument("--stage-duration", help="ATTNLOAD_STAGE_DURATION, e.g. 60s")
    up.add_argument("--profile", help="ATTNLOAD_PROFILE")
    up.add_argument(
        "--api-key-env",
        action="append",
        default=[],
        metavar="VAR",
        help="copy this local env var into the attnload-api-keys Secret (repeatable)",
    )
    up.add_argument(
        "--extras",
        action="store_true",
        help="also apply the manifests' extras/ (the headless Job, the Prometheus Operator's ServiceMonitors, "
        "PodMonitors and PrometheusRule: the cluster must serve those kinds)",
    )
    up.add_argument("--no-wait", action="store_true", help="return after applying")
    sub.add_parser("status", help="Deployments' readiness and the Locust master's state")
    scale = sub.add_parser("scale", help="set the number of Locust workers")
    scale.add_argument("replicas", type=_non_negative)
    scale.add_argument("--no-wait", action="store_true")
    run = sub.add_parser("run", help="start a test through the master's /swarm")
    # Locust's spellings, as `attnload run` accepts them: -u, -r, -t/--run-time (alias --duration)
    run.add_argument("-u", "--users", type=int, default=32, help="users (ignored when ATTNLOAD_SHAPE drives the test)")
    run.add_argument("-r", "--spawn-rate", type=float, default=8.0, help="users started per second")
    run.add_argument(
        "-t",
        "--run-time",
        "--duration",
        dest="run_time",
        help="stop after this long, e.g. 5m (default: the shape's end or /stop)",
    )
    run.add_argument(
        "--requests-out",
        metavar="NAME",
        help="also write one JSON line per request to NAME in the master's results volume (gzip when "
        "it ends in .gz); `attnload cluster results` fetches it with the results",
    )
    run.add_argument("--wait", action="store_true", help="block until the test stops, then fetch results")
    run.add_argument("--out", type=Path, default=Path("results"), help="where --wait puts results (results/)")
    sub.add_parser("stop", help="stop the running test (the master writes results)")
    results = sub.add_parser("results", help="copy the master's results files here")
    results.add_argument("--out", type=Path, default=Path("results"), help="directory (results/)")
    logs = sub.add_parser("logs", help="recent log lines of a component's pods")
    logs.add_argument("component", nargs="?", default="master", choices=["master", "worker", "sim"])
    logs.add_argument("--tail", type=int, default=100)
    down = sub.add_parser("down", help="delete the attnload namespace and everything in it")
    down.add_argument("--no-wait", action="store_true")


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value
