"""``attnload report RESULTS.json [--html OUT] [--compare OTHER.json]``: table on stdout, HTML on disk."""

from __future__ import annotations

import argparse
from pathlib import Path

from attnload.errors import UsageError
from attnload.report.compare import compare_results
from attnload.report.console import print_summary, render_comparison, wide_console
from attnload.report.html import write_html
from attnload.results.model import load_results


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", metavar="RESULTS", help="results JSON written by `attnload run` or `demo`")
    parser.add_argument("--html", metavar="OUT", default=None,
                        help="where to write the HTML report (default: next to RESULTS, with .html)")
    parser.add_argument("--compare", metavar="OTHER", default=None,
                        help="a baseline results JSON: show both runs with deltas and flag regressions")


def run(args: argparse.Namespace) -> int:
    results = load_results(args.results)  # UsageError (one line, exit 2) for a bad file
    baseline = load_results(args.compare) if args.compare else None
    console = wide_console()
    print_summary(results, console)
    if baseline is not None:
        console.print(render_comparison(compare_results(results, baseline)))
    out = Path(args.html) if args.html else Path(args.results).with_suffix(".html")
    try:
        written = write_html(results, out, compare=baseline)
    except OSError as exc:
        raise UsageError(f"cannot write the HTML report to {out}: {exc.strerror}; pass --html OUT") from None
    console.print(f"HTML report: {written}", highlight=False)
    return 0
