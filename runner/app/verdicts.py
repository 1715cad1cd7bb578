"""The decision rules on a plain input file: compute a verdict, write its report.

::

    from runner.app import compute_verdict

    rule_input, result = compute_verdict("input.json")     # "-" reads stdin
    result["decision"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .files import read_json_file
from .outdir import restage, staged_out

__all__ = ["compute_verdict", "read_rule_input", "write_verdict_report"]


def read_rule_input(source: str) -> Any:
    """The JSON document in file ``source`` (``-`` = stdin), read as hostile input (``ledger.strictjson``):
    ``FormatError`` if unreadable, not UTF-8, over the size or nesting bound, or not strict JSON."""
    return read_json_file(source, "input", name=f"{source}: input")


def compute_verdict(source: str) -> tuple[Any, dict[str, Any]]:
    """(the rule input, the result) for the input file ``source``; ``FieldError`` names a bad member (exit 2)."""
    from ..decide import compute

    data = read_rule_input(source)
    return data, compute(data)


def write_verdict_report(source: str, out: Path, title: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Compute the verdict and write ``report.html``, ``report.md`` and ``plots/`` into ``out``;
    (the result, the paths written: ``html``, ``markdown``, ``figures``)."""
    from ..report import write_report

    data, result = compute_verdict(source)
    with staged_out(out) as stage:  # refuses a symlinked or non-directory --out first
        paths = write_report(data, result, stage, title=title)
    written = {"html": restage(paths.html, stage, out), "markdown": restage(paths.markdown, stage, out),
               "figures": [restage(p, stage, out) for p in paths.figures]}
    return result, written
