"""Write a report directory: report.html, report.md and plots/*.svg (the figures report.md links)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.errors import FormatError
from ledger.strictwrite import open_dir, write_whole

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


def _write(directory: int, shown: Path, name: str, data: bytes) -> None:
    """Write ``name`` whole (fresh temporary file, rename), never through a symlink planted at it."""
    write_whole(name, data, "report file", mode=0o644, dir_fd=directory, shown=shown / name)


def write_report(data: Mapping[str, Any], result: Mapping[str, Any], out_dir: Path | str, *,
                 title: str | None = None, context: Mapping[str, Any] | None = None,
                 plots: bool = True, banners: Sequence[Section] = (),
                 appendix: Sequence[Section] = (), ending: Sequence[str] = ()) -> ReportPaths:
    """Render the report of ``result`` (= ``runner.decide.compute(data)``) into ``out_dir``.

    ``context`` (e.g. window id, plan digest, ledger seqs, inputs_digest) is shown as a table
    under the decision. Returns the paths written. ``FormatError`` if ``out_dir`` is unusable.
    """
    out = Path(out_dir)
    doc = build_document(data, result, title=title or f"tally verdict report: {result['rule']}",
                         context=context, plots=plots, banners=banners, appendix=appendix, ending=ending)
    try:
        directory = open_dir(out, "report directory")  # a symlink at out or plots/ is refused
    except FormatError as exc:
        raise FormatError(f"--out {out}: cannot write the report: {exc}") from None
    try:
        figures = []
        if doc.figures():
            plots_fd = open_dir(Path("plots"), "report directory", dir_fd=directory)
            try:
                for figure in doc.figures():
                    name = Path(figure_path(figure)).name
                    _write(plots_fd, out / "plots", name, figure.svg)
                    figures.append(out / "plots" / name)
            finally:
                os.close(plots_fd)
        _write(directory, out, "report.html", render_html(doc).encode("utf-8"))
        _write(directory, out, "report.md", render_markdown(doc).encode("utf-8"))
    finally:
        os.close(directory)
    return ReportPaths(out / "report.html", out / "report.md", tuple(figures))
