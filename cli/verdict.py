"""``tally verdict compute|report``: the decision rules on a plain input file.

Exit 0 when a verdict was computed (whatever it is), 2 for bad input (one line naming the
field). numpy, scipy and matplotlib are imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runner.app import compute_verdict, write_verdict_report
from runner.report import fixed, metric_label, metric_value

from .common import command, print_json

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console
    from rich.table import Table


INPUT_HELP = "Rule input JSON (win2-v1 or pp3-v1, see docs/rules.md); - reads stdin."


def verdict_console() -> Console:
    """The terminal's width; 200 columns when stdout is not a terminal (a file or a pipe)."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200)


def _num(value: float | None) -> str:
    return "-" if value is None else fixed(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2%}"


def _series(values: list[float | None], fmt: Any = _num, sep: str = " / ") -> str:
    return sep.join(fmt(v) for v in values)


def print_result(data: dict[str, Any], result: dict[str, Any], console: Console) -> None:
    """The result as rich tables: per cell (win2) or pair (pp3) figures, the reasons, the decision.

    Tables fit the console's width: one wide table where it fits, else narrower tables with
    the per-repeat values one per line; no cell is cut (a long name wraps, an interval never).
    """
    if result["rule"] == "win2-v1":
        _print_win2(result, console)
    else:
        _print_pp3(data, result, console)
    console.print("Reasons:")
    for reason in result["reasons"]:
        console.print(f"  - {reason}", markup=False, highlight=False)
    console.print(f"Decision: {result['decision']}", markup=False, highlight=False)


def _table(console: Console, title: str, headers: Sequence[str], rows: Sequence[Sequence[str]],
           keep: Sequence[int] = ()) -> Table:
    """A table whose cells fold rather than cut; columns in ``keep`` never wrap (intervals, verdicts)."""
    from rich.markup import escape  # names come from the input: shown as they are, never read as markup
    from rich.table import Table

    table = Table(title=escape(title), title_justify="left", expand=False)
    for index, header in enumerate(headers):
        table.add_column(escape(header), overflow="fold", no_wrap=index in keep)
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def _fits(console: Console, table: Table) -> bool:
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(10**6), table).maximum <= console.width


def _print_win2(result: dict[str, Any], console: Console) -> None:
    conf = f"{result['params']['confidence']:.0%}"
    for cell, cell_result in result["cells"].items():
        title = f"{cell}: {cell_result['verdict'] or 'not computed (incomplete data)'}"
        metrics = cell_result["metrics"]
        wide = _table(console, title, ("metric", "role", "s1 per repeat", "s2 per repeat", "s3 per repeat",
                                       "d per repeat", "point", f"{conf} interval", "verdict"),
                      [(_label(name, m["direction"]), m["role"],
                        *(_values(name, m["per_repeat"][s]) for s in ("s1", "s2", "s3")), _series(m["d"], _pct),
                        _pct(m["point"]), _interval(m), m["verdict"] or "-") for name, m in metrics.items()],
                      keep=(6, 7, 8))
        if _fits(console, wide):
            console.print(wide)
        else:  # narrow: the decision figures first, then the values per repeat, one repeat a line
            console.print(_table(console, title, ("metric", "point", f"{conf} interval", "verdict"),
                                 [(_label(name, f"{m['role']}, {m['direction']} is better"), _pct(m["point"]),
                                   _interval(m), m["verdict"] or "-") for name, m in metrics.items()],
                                 keep=(1, 2, 3)))
            console.print(_table(console, f"{cell}: per repeat (s1, s2, s3 values; d = candidate / control - 1)",
                                 ("metric", "s1", "s2", "s3", "d"),
                                 [(metric_label(name), *(_values(name, m["per_repeat"][s], "\n")
                                                         for s in ("s1", "s2", "s3")),
                                   _series(m["d"], _pct, sep="\n")) for name, m in metrics.items()],
                                 keep=(1, 2, 3, 4)))
        spread = result["spread"][cell]
        console.print(f"  spread: in-window OFF/OFF {_series(spread['in_window_off_off'], _pct)}; "
                      f"archive day-to-day {_pct(spread['archive_day_to_day'])}", markup=False, highlight=False)
    literal = result["checklist_literal"]
    cells = ", ".join(f"{c} {v or '-'}" for c, v in literal["cells"].items())
    console.print(f"checklist_literal (ms_per_round primary): {literal['decision']} ({cells}); what the "
                  "checklist read literally would have decided: recorded, never deciding", markup=False,
                  highlight=False)


def _label(name: str, what: str) -> str:
    """``pooled_rate_tps (higher) in tok/s``: the metric, what it is, and the unit its values are shown in."""
    unit = metric_label(name)[len(name):].strip(" ()")
    return f"{name} ({what})" + (f" in {unit}" if unit else "")


def _values(name: str, values: list[float | None], sep: str = " / ") -> str:
    """A metric's per-repeat values in its display unit (TTFT in ms)."""
    return sep.join(metric_value(name, v) for v in values)


def _interval(metric: dict[str, Any]) -> str:
    return "-" if metric["low"] is None else f"[{_pct(metric['low'])}, {_pct(metric['high'])}]"


def _print_pp3(data: dict[str, Any], result: dict[str, Any], console: Console) -> None:
    rows = {(r["block"], r["family"], r["context"]): r for r in data["requests"]}
    lines = []
    for label, entry in result["per_pair"].items():
        family, context = label.split("/", 1)
        rates = []
        for block in ("A1", "A2", "B1", "B2"):
            r = rows.get((block, family, context))
            if r is None or r["delivered_tokens"] is None or not r["decode_s"]:
                rates.append("-" if r is None else r["status"])
            else:
                rates.append(_num(r["delivered_tokens"] / r["decode_s"]) + ("" if r["status"] == "ok"
                                                                            else f" ({r['status']})"))
        lines.append((label, *rates, _pct(entry["gain"]), _pct(entry["ttft_change"]),
                      _pct(entry["round_p95_change"])))
    title = "pp3-v1 per pair (tok/s = delivered tokens / decode s)"
    wide = _table(console, title, ("pair", "A1 tok/s", "A2 tok/s", "B1 tok/s", "B2 tok/s", "gain", "TTFT change",
                                   "p95 round change"), lines, keep=(5, 6, 7))
    if _fits(console, wide):
        console.print(wide)
    else:
        console.print(_table(console, title, ("pair", "A1 tok/s", "A2 tok/s", "B1 tok/s", "B2 tok/s"),
                             [line[:5] for line in lines]))
        console.print(_table(console, "pp3-v1 per pair: B against A", ("pair", "gain", "TTFT change",
                                                                       "p95 round change"),
                             [(line[0], *line[5:]) for line in lines], keep=(1, 2, 3)))
    params = result["params"]
    families = ", ".join(f"{f} {_pct(v['gain'])} ({v['pairs']} pairs)" for f, v in result["per_family"].items())
    console.print(f"point gain {_pct(result['point_gain'])}; {params['interval']:.0%} bootstrap lower bound "
                  f"{_pct(result['lower_bound'])}; {result['distinct_resamples'] or '-'} distinct values in "
                  f"{result['resamples']} resamples (seed {params['seed']}); per family: {families or '-'}",
                  markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add the ``verdict`` group to ``app``."""
    verdict = typer.Typer(help="Decision rules win2-v1 and pp3-v1 on a plain input file: compute, report.",
                          no_args_is_help=True)

    @command(verdict, "compute")
    def compute_cmd(
        source: Annotated[str, typer.Argument(metavar="INPUT.json", help=INPUT_HELP)],
        as_json: Annotated[bool, typer.Option("--json", help="Print the result JSON (key names fixed).")] = False,
    ) -> None:
        """Compute a verdict; exit 0 whatever it is, 2 for bad input."""
        data, result = compute_verdict(source)
        if as_json:
            print_json(result)
        else:
            print_result(data, result, verdict_console())

    @command(verdict, "report")
    def report_cmd(
        source: Annotated[str, typer.Argument(metavar="INPUT.json", help=INPUT_HELP)],
        out: Annotated[Path, typer.Option("--out", help="Directory for report.html, report.md and plots/.")],
        title: Annotated[str | None, typer.Option("--title", help="Report title.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the decision and the paths written as JSON.")]
        = False,
    ) -> None:
        """Compute a verdict and write report.html (self-contained) and report.md with its plots."""
        result, written = write_verdict_report(source, out, title)
        if as_json:
            print_json({"rule": result["rule"], "decision": result["decision"], **written})
        else:
            print(f"{result['rule']}: {result['decision']}")
            print(f"wrote {written['html']}")
            print(f"wrote {written['markdown']}")

    app.add_typer(verdict, name="verdict")
