"""Report figures (matplotlib, Agg backend, imported lazily), returned as deterministic SVG bytes.

SVG text stays text (``svg.fonttype = none``), the file carries no date and element ids come
from a fixed salt, so the same input and result always render the same bytes.

Names come from the input (cells, metrics, families, contexts) and are drawn literally:
every title and tick label is a Text with ``parse_math=False`` and ``usetex=False``
(:data:`LITERAL`), so a ``$`` (or ``$\\foo{x$``) is a dollar sign, never mathtext that
matplotlib might fail to parse.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure

__all__ = ["fitted_range", "pp3_figure", "primary_figure", "win2_cell_figure"]

START_STYLE = {"s1": ("o", "#1f77b4", "s1 control"), "s2": ("^", "#d62728", "s2 candidate"),
               "s3": ("s", "#2ca02c", "s3 control")}
LITERAL: dict[str, Any] = {"parse_math": False, "usetex": False}  # Text properties: no mathtext, no TeX
VERDICT_COLOUR = {"WIN": "#2ca02c", "LOSS": "#d62728", "NO_CHANGE": "#7f7f7f", "OK": "#2ca02c", None: "#bbbbbb"}


def _new_figure(width: float, height: float, rows: int, cols: int) -> tuple[MplFigure, Any]:
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:  # no GUI: figures are only ever written to files
        matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def _svg(fig: MplFigure) -> bytes:
    import matplotlib

    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "tally-report", "svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": "tally"})
    return buffer.getvalue()


def _nan(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else float(v) for v in values]


def _per_repeat_panel(ax: Axes, name: str, metric: Mapping[str, Any]) -> None:
    per = metric["per_repeat"]
    n = len(per["s1"])
    x = list(range(1, n + 1))
    for r, (a, b) in enumerate(zip(per["s1"], per["s3"], strict=True), start=1):
        if a is not None and b is not None:  # the control spread: the span of the two bracketing starts
            ax.fill_between([r - 0.25, r + 0.25], [min(a, b)] * 2, [max(a, b)] * 2, color="#1f77b4", alpha=0.15,
                            linewidth=0, label="control spread" if r == 1 else None)
    for start, offset in (("s1", -0.1), ("s2", 0.0), ("s3", 0.1)):
        marker, colour, label = START_STYLE[start]
        ax.plot([v + offset for v in x], _nan(per[start]), marker=marker, color=colour, linestyle="none",
                markersize=7, label=label)
    ax.set_xticks(x)
    ax.set_xlabel("repeat")
    ax.set_title(f"{name} ({metric['role']}, {metric['direction']} is better)\nverdict {metric['verdict'] or '-'}",
                 fontsize=9, **LITERAL)
    ax.grid(alpha=0.3)


def _differences_panel(ax: Axes, name: str, metric: Mapping[str, Any], bar: float, confidence: float) -> None:
    d = _nan(metric["d"])
    x = list(range(1, len(d) + 1))
    ax.axhline(0, color="black", linewidth=0.8)
    for sign in (1, -1):
        ax.axhline(sign * bar * 100, color="#ff7f0e", linestyle="--", linewidth=1,
                   label=f"+/- bar {bar:.1%}" if sign == 1 else None)
    if metric["point"] is not None:
        ax.axhspan(metric["low"] * 100, metric["high"] * 100, color=VERDICT_COLOUR[metric["verdict"]], alpha=0.18,
                   label=f"{confidence:.0%} interval")
        ax.axhline(metric["point"] * 100, color=VERDICT_COLOUR[metric["verdict"]], linewidth=2,
                   label=f"point {metric['point']:+.2%}")
    ax.plot(x, [v * 100 for v in d], marker="D", color="#d62728", linestyle="none", label="d_r")
    ax.set_xticks(x)
    ax.set_xlabel("repeat")
    ax.set_ylabel("candidate / control - 1 (%)")
    ax.set_title(f"{name}: per-repeat relative difference", fontsize=9, **LITERAL)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def fitted_range(low: float, high: float, bar: float) -> tuple[float, float]:
    """An axis range (in %) holding the interval [low, high] and the bar +/-bar, with a margin: scaled to them."""
    lo, hi = min(low, -bar) * 100, max(high, bar) * 100
    pad = max((hi - lo) * 0.12, 0.1)
    return lo - pad, hi + pad


def _interval_axis(ax: Axes, name: str, metric: Mapping[str, Any], bar: float, *, label: str) -> None:
    """One metric's point and interval on its own scale, with the bar and zero."""
    colour = VERDICT_COLOUR.get(metric["verdict"], "#7f7f7f")
    lo, hi = fitted_range(metric["low"], metric["high"], bar)
    ax.plot([metric["low"] * 100, metric["high"] * 100], [0, 0], color=colour, linewidth=6, solid_capstyle="butt")
    ax.plot([metric["point"] * 100], [0], marker="o", markersize=9, color="black")
    ax.axvline(0, color="black", linewidth=0.8)
    for sign in (1, -1):
        ax.axvline(sign * bar * 100, color="#ff7f0e", linestyle="--", linewidth=1.5)
    ax.set_xlim(lo, hi)
    ax.set_xticks([round(lo + (hi - lo) * i / 4, 2) for i in range(5)])
    ax.set_yticks([])
    ax.set_ylim(-1, 1)
    ax.set_title(label, fontsize=9, loc="left", **LITERAL)
    ax.grid(alpha=0.3, axis="x")


def _forest_panel(ax: Axes, metrics: Mapping[str, Mapping[str, Any]], bar: float) -> None:
    """Every metric's point and interval, each on its own scale (a wide one never squashes the primary)."""
    names = [n for n, m in metrics.items() if m["point"] is not None]
    if not names:
        ax.set_title("every metric: not computed", fontsize=9, **LITERAL)
        return
    spec = ax.get_subplotspec()
    if spec is None:
        raise ValueError("the forest panel must be a subplot")
    grid = spec.subgridspec(len(names), 1)
    figure = ax.get_figure()
    ax.remove()
    for i, name in enumerate(names):
        sub = figure.add_subplot(grid[i, 0])  # type: ignore[union-attr]
        m = metrics[name]
        _interval_axis(sub, name, m, bar, label=f"{name} ({m['role']}, {m['direction']} is better): "
                                                f"{m['point']:+.2%} {m['verdict'] or '-'}")
        sub.tick_params(axis="x", labelsize=7)
    sub.set_xlabel("mean relative difference (%), each metric on its own scale")


def primary_figure(cell: str, name: str, metric: Mapping[str, Any], params: Mapping[str, Any]) -> bytes:
    """The primary metric's interval against its bar, on an axis fitted to them (its ticks span the axis)."""
    fig, axes = _new_figure(8, 1.9, 1, 1)
    ax = axes[0][0]
    _interval_axis(ax, name, metric, params["bar"],
                   label=f"{cell}: {name} {metric['point']:+.2%}, {params['confidence']:.0%} interval "
                         f"[{metric['low']:+.2%}, {metric['high']:+.2%}], bar +/-{params['bar']:.2%}: "
                         f"{metric['verdict'] or '-'}")
    ax.set_xlabel("candidate / control - 1 (%)")
    return _svg(fig)


def _spread_panel(ax: Axes, spread: Mapping[str, Any]) -> None:
    off = _nan(spread["in_window_off_off"])
    x = list(range(1, len(off) + 1))
    ax.bar(x, [v * 100 for v in off], color="#1f77b4", alpha=0.7, label="in-window OFF/OFF |s1-s3|/mean")
    day = spread["archive_day_to_day"]
    if day is not None:
        ax.axhline(day * 100, color="#9467bd", linestyle="-.", label=f"archive day-to-day {day:.2%}")
    ax.set_xticks(x)
    ax.set_xlabel("repeat")
    ax.set_ylabel("spread of the primary (%)")
    ax.set_title("control spread" + ("" if day is not None else " (archive: fewer than two entries)"), fontsize=9,
                 **LITERAL)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def win2_cell_figure(cell: str, cell_result: Mapping[str, Any], spread: Mapping[str, Any],
                     params: Mapping[str, Any]) -> bytes:
    """Primary and guards per repeat (s1/s2/s3, control spread), d_r with interval and bar, all metrics, spreads."""
    metrics = cell_result["metrics"]
    fig, axes = _new_figure(13, 7.5, 2, 3)
    primary = next(n for n, m in metrics.items() if m["role"] == "primary")
    guards = [n for n, m in metrics.items() if m["role"] == "guard"]
    for ax, name in zip(axes[0], [primary, *guards], strict=False):
        _per_repeat_panel(ax, name, metrics[name])
    axes[0][0].legend(fontsize=7, loc="best")
    _differences_panel(axes[1][0], primary, metrics[primary], params["bar"], params["confidence"])
    _forest_panel(axes[1][1], metrics, params["bar"])
    _spread_panel(axes[1][2], spread)
    fig.suptitle(f"{cell}: {cell_result['verdict'] or 'not computed (incomplete data)'}", fontsize=12, **LITERAL)
    return _svg(fig)


def pp3_figure(result: Mapping[str, Any], gains: Sequence[float] | None) -> bytes:
    """Per pair gains; the bootstrap distribution with its lower bound; TTFT and p95-round changes per pair."""
    fig, axes = _new_figure(14, 4.8, 1, 3)
    ax_pairs, ax_boot, ax_guard = axes[0]
    params = result["params"]
    pairs = list(result["per_pair"])
    x = list(range(len(pairs)))

    pair_gains = _nan([result["per_pair"][p]["gain"] for p in pairs])
    ax_pairs.bar(x, [g * 100 for g in pair_gains], color="#1f77b4")
    ax_pairs.axhline(0, color="black", linewidth=0.8)
    ax_pairs.axhline(params["min_gain"] * 100, color="#ff7f0e", linestyle="--",
                     label=f"min gain {params['min_gain']:.0%}")
    if result["point_gain"] is not None:
        ax_pairs.axhline(result["point_gain"] * 100, color="#2ca02c", label=f"pooled gain {result['point_gain']:+.2%}")
    ax_pairs.set_xticks(x)
    ax_pairs.set_xticklabels(pairs, rotation=45, ha="right", fontsize=7, **LITERAL)
    ax_pairs.set_ylabel("throughput gain B/A - 1 (%)")
    ax_pairs.set_title("gain per pair (family/context)", fontsize=9, **LITERAL)
    ax_pairs.legend(fontsize=7)
    ax_pairs.grid(alpha=0.3)

    if gains is not None and len(gains) > 0:
        values = [g * 100 for g in gains]
        distinct = sorted({round(v, 10) for v in values})
        if len(distinct) <= 40:  # few distinct resamples (small-family limit): show each value and its count
            counts = [sum(1 for v in values if round(v, 10) == u) for u in distinct]
            span = max([*distinct, 0.0]) - min([*distinct, 0.0])
            bars = ax_boot.bar(distinct, counts, width=max(span / 30, 0.05), color="#7f7f7f")
            ax_boot.bar_label(bars, fontsize=7)
        else:
            ax_boot.hist(values, bins=40, color="#7f7f7f")
        ax_boot.axvline(0, color="black", linewidth=0.8)
        if result["lower_bound"] is not None:
            ax_boot.axvline(result["lower_bound"] * 100, color="#d62728", linestyle="--",
                            label=f"lower bound {result['lower_bound']:+.2%}")
        if result["point_gain"] is not None:
            ax_boot.axvline(result["point_gain"] * 100, color="#2ca02c", label=f"point {result['point_gain']:+.2%}")
        ax_boot.legend(fontsize=7)
        ax_boot.set_title(f"bootstrap: {result['resamples']} resamples, {result['distinct_resamples']} distinct values "
                          f"({len(result['per_family'])} families)", fontsize=9, **LITERAL)
    else:
        ax_boot.set_title("bootstrap not computed", fontsize=9, **LITERAL)
    ax_boot.set_xlabel("resampled gain (%)")
    ax_boot.set_ylabel("resamples")
    ax_boot.grid(alpha=0.3)

    ttft = _nan([result["per_pair"][p]["ttft_change"] for p in pairs])
    p95 = _nan([result["per_pair"][p]["round_p95_change"] for p in pairs])
    ax_guard.bar([i - 0.2 for i in x], [v * 100 for v in ttft], width=0.4, color="#9467bd", label="TTFT")
    ax_guard.bar([i + 0.2 for i in x], [v * 100 for v in p95], width=0.4, color="#8c564b", label="p95 round time")
    ax_guard.axhline(params["max_regression"] * 100, color="#d62728", linestyle="--",
                     label=f"regression limit +{params['max_regression']:.0%}")
    ax_guard.axhline(0, color="black", linewidth=0.8)
    ax_guard.set_xticks(x)
    ax_guard.set_xticklabels(pairs, rotation=45, ha="right", fontsize=7, **LITERAL)
    ax_guard.set_ylabel("B / A - 1 (%)  (lower is better)")
    ax_guard.set_title("TTFT and p95 round-time change per pair", fontsize=9, **LITERAL)
    ax_guard.legend(fontsize=7)
    ax_guard.grid(alpha=0.3)
    fig.suptitle(f"pp3-v1: {result['decision']}", fontsize=12, **LITERAL)
    return _svg(fig)
