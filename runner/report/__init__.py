"""Verdict reports: ``report.html`` (self-contained) and ``report.md`` for a rule's input and result.

::

    from runner.report import window_report, write_report

    paths = write_report(rule_input, result, Path("out"))     # report.html, report.md, plots/
    window_report(ledger, "w1", Path("out"))                  # from the window's recorded decision

``write_report(input, result, out_dir)`` is the one entry point for ``tally verdict report``
and ``window_report`` for ``tally window report``; ``build_document`` + ``render_html`` /
``render_markdown`` give the same content without touching files. Rendering reads no clock:
the same input, result and context give the same bytes.
"""

from __future__ import annotations

from .document import Document
from .html import render_html
from .markdown import render_markdown
from .sections import build_document
from .units import fixed, metric_label, metric_value
from .window import window_report
from .write import ReportPaths, write_report

__all__ = [
    "Document",
    "ReportPaths",
    "build_document",
    "fixed",
    "metric_label",
    "metric_value",
    "render_html",
    "render_markdown",
    "window_report",
    "write_report",
]
