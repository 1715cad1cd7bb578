"""Write a report directory: report.html, report.md and plots/*.svg (the figures report.md links)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.errors import FormatError

from .document import Section
from .html import render_html
from .markdown import figure_path, render_markdown
from .sections import build_document

__all__ = ["ReportPaths", "write_report"]


@dataclass(frozen=True)
class ReportPaths:
    html: Path
    markdown: Path
    figures: tuple[Path, ...]

    def to_json(self) -> dict[str, Any]:
        return {"html": str(self.html), "markdown": str(self.markdown), "figures": [str(p) for p in self.figures]}


def _write(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename, so a reader never sees half a report."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_report(data: Mapping[str, Any], result: Mapping[str, Any], out_dir: Path | str, *,
                 title: str | None = None, context: Mapping[str, Any] | None = None,
                 plots: bool = True, banners: Sequence[Section] = (),
                 appendix: Sequence[Section] = ()) -> ReportPaths:
    """Render the report of ``result`` (= ``runner.decide.compute(data)``) into ``out_dir``.

    ``context`` (e.g. window id, plan digest, ledger seqs, inputs_digest) is shown as a table
    under the decision. Returns the paths written. ``FormatError`` if ``out_dir`` is unusable.
    """
    out = Path(out_dir)
    doc = build_document(data, result, title=title or f"tally verdict report: {result['rule']}",
                         context=context, plots=plots, banners=banners, appendix=appendix)
    try:
        out.mkdir(parents=True, exist_ok=True)
        figures = []
        if doc.figures():
            (out / "plots").mkdir(exist_ok=True)
        for figure in doc.figures():
            path = out / figure_path(figure)
            _write(path, figure.svg)
            figures.append(path)
        html = out / "report.html"
        markdown = out / "report.md"
        _write(html, render_html(doc).encode("utf-8"))
        _write(markdown, render_markdown(doc).encode("utf-8"))
    except OSError as exc:
        raise FormatError(f"--out {out}: cannot write the report: {exc.strerror or exc}") from None
    return ReportPaths(html, markdown, tuple(figures))
