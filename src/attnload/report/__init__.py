"""Renderings of one :class:`attnload.results.Results`: terminal table, HTML report, live views.

Every output here reads the typed results model and never computes a percentile of its
own (STYLE.md convention 2); modules only format, compare and explain numbers the
model already holds. Submodules import lazily so ``attnload.report.console`` does not
pull in Flask or Locust.
"""

from __future__ import annotations

from attnload.report.compare import Comparison, compare_results
from attnload.report.console import print_summary, render_table
from attnload.report.html import render_html, write_html

__all__ = [
    "Comparison",
    "compare_results",
    "print_summary",
    "render_html",
    "render_table",
    "write_html",
]
