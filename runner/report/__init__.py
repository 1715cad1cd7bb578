"""Verdict reports: ``report.html`` (self-contained) and ``report.md`` for a rule's input and result.

``write_report(input, result, out_dir)`` is the one entry point the CLI uses for
``tally verdict report`` and ``tally window report``; ``build_document`` + ``render_html`` /
``render_markdown`` give the same content without touching files. Rendering reads no clock:
the same input, result and context give the same bytes.
"""

from __future__ import annotations

from .document import Document
from .html import render_html
from .markdown import render_markdown
from .sections import build_document
from .write import ReportPaths, write_report

__all__ = ["Document", "ReportPaths", "build_document", "render_html", "render_markdown", "write_report"]
