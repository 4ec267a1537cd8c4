"""``attnload report RESULTS.json [--html OUT] [--compare OTHER.json]``: table on stdout, HTML on disk."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnload.errors import UsageError
from attnload.report.compare import compare_results, regression_status
from attnload.report.console import print_summary, render_comparison, wide_console
from attnload.report.html import write_html
from attnload.report.requests import find_requests_file
from attnload.results.model import load_results


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", metavar="RESULTS", help="results JSON written by `attnload run` or `demo`")
    parser.add_argument(
        "--html",
        metavar="OUT",
        default=None,
        help="where to write the HTML report (default: next to RESULTS, with .html)",
    )
    parser.add_argument(
        "--compare",
        metavar="OTHER",
        default=None,
        help="a baseline results JSON: show both runs with deltas and flag regressions",
    )
    parser.add_argument(
        "--requests",
        metavar="PATH",
        default=None,
        help="the run's --requests-out JSONL (default: the path the results recorded, or that "
        "file beside RESULTS); adds a TTFT-vs-prompt-length scatter to the HTML",
    )
    parser.add_argument(
        "--fail-on-regression",
        metavar="PCT",
        type=float,
        default=None,
        help="with --compare: exit 1 when any metric regressed by more than PCT %% (a latency "
        "higher, a throughput lower) or the failure ratio rose by over 1 point",
    )


def run(args: argparse.Namespace) -> int:
    gate = args.fail_on_regression
    if gate is not None and (args.compare is None or not gate >= 0):
        raise UsageError(
            f"--fail-on-regression {gate:g} needs --compare BASELINE and a percentage ≥ 0"
            if args.compare is None
            else f"--fail-on-regression {gate:g}: use a percentage ≥ 0"
        )
    results = load_results(args.results)  # UsageError (one line, exit 2) for a bad file
    baseline = load_results(args.compare) if args.compare else None
    console = wide_console()
    print_summary(results, console)
    status: tuple[int, list[str]] = (0, [])
    if baseline is not None:
        comparison = (
            compare_results(results, baseline)
            if gate is None
            else compare_results(results, baseline, threshold=gate / 100)
        )
        console.print(render_comparison(comparison))
        if gate is not None:
            status = regression_status(comparison)
    out = Path(args.html) if args.html else Path(args.results).with_suffix(".html")
    try:
        written = write_html(
            results, out, compare=baseline, requests=find_requests_file(results, args.results, args.requests)
        )
    except OSError as exc:
        raise UsageError(f"cannot write the HTML report to {out}: {exc.strerror}; pass --html OUT") from None
    console.print(f"HTML report: {written}", highlight=False)
    for line in status[1]:
        print(f"attnload report: {line}", file=sys.stderr)
    return status[0]
