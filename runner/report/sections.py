"""Build the report document of a rule's (input, result): every figure the issue lists, in order.

Pure apart from rendering figures in memory: no files, no clock. ``plots=False`` leaves the
figures out (the text is the same), for callers that only need the tables.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ledger.canonical import canonical

from .document import Block, Bullets, Document, Figure, Para, Section, Table, Tone
from .units import fixed, metric_label, metric_value

__all__ = ["build_document", "fmt_number", "fmt_pct"]

DASH = "-"


def fmt_number(value: float | None) -> str:
    return DASH if value is None else fixed(value)


def fmt_pct(value: float | None) -> str:
    return DASH if value is None else f"{value:+.2%}"


def _series(values: list[float | None], fmt: Any = fmt_number) -> str:
    return " / ".join(fmt(v) for v in values)


def input_sha256(data: Mapping[str, Any]) -> str:
    """SHA-256 of the input's canonical JSON (RFC 8785): the same for any serialisation of the same input."""
    return hashlib.sha256(canonical(dict(data))).hexdigest()


def build_document(data: Mapping[str, Any], result: Mapping[str, Any], *, title: str,
                   context: Mapping[str, Any] | None = None, plots: bool = True,
                   banners: Sequence[Section] = (), appendix: Sequence[Section] = (),
                   ending: Sequence[str] = ()) -> Document:
    """The report of ``result`` (from ``runner.decide.compute(data)``).

    The page opens with the decision in plain words (``headline``), then ``ending`` (how the
    window ended and why, one line each, right under it), the formal decision and its reasons;
    ``banners`` follow (what a reader must see first); ``appendix`` follows the rule's sections
    (a window's gate results and plan facts).
    """
    headline, tone = decision_headline(result)
    head = [_decision_section(result, ending), *banners]
    if context:
        rows = tuple((str(k), _text(v)) for k, v in context.items())
        head.append(Section("Context", (Table(("field", "value"), rows),)))
    if result["rule"] == "win2-v1":
        body = _win2_sections(data, result, plots)
    elif result["rule"] == "pp3-v1":
        body = _pp3_sections(data, result, plots)
    else:
        raise ValueError(f"no report for rule {result['rule']!r}")
    return Document(title, result["rule"], result["decision"], (*head, *body, *appendix), headline, tone)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


PLAIN: Mapping[str, tuple[str, Tone]] = {
    "WIN": ("Promote the candidate", "promote"),
    "CANDIDATE": ("Promote the candidate to promotion review", "promote"),
    "LOSS": ("Keep production: the candidate is worse", "keep"),
    "NO_CHANGE": ("Keep production: no difference beyond the bar", "keep"),
    "NO_PROMOTION": ("Keep production: no promotion", "keep"),
    "INCONCLUSIVE": ("No decision: the window could not decide", "none"),
    "REJECT": ("No decision: the window was rejected", "none"),
}
"""Each decision in plain words, and its tone (the colour of the page's first heading)."""


def decision_headline(result: Mapping[str, Any]) -> tuple[str, Tone]:
    """The decision in plain words and why, in one sentence: the report's first heading."""
    decision = str(result.get("decision"))
    words, tone = PLAIN.get(decision, (f"Decision {decision}", "none"))
    why = _why(result)
    return (f"{words} ({why})" if why else words), tone


def _why(result: Mapping[str, Any]) -> str:
    decision = result.get("decision")
    reasons = [str(r) for r in result.get("reasons") or []]
    if decision in ("INCONCLUSIVE", "REJECT"):
        return "; ".join(reasons[:1]) + (f"; and {len(reasons) - 1} more reason(s) below" if len(reasons) > 1 else "")
    if result.get("rule") == "win2-v1":
        bar = (result.get("params") or {}).get("bar")
        cells = []
        for cell, cell_result in (result.get("cells") or {}).items():
            for name in primaries_of(result, cell_result):
                m = cell_result["metrics"][name]
                if m["low"] is not None:
                    cells.append(f"{cell} {name} {fmt_pct(m['point'])} in [{fmt_pct(m['low'])}, {fmt_pct(m['high'])}]")
        if not cells:
            return "; ".join(reasons[:1])
        return "; ".join(cells) + (f" against the +/-{bar:.2%} bar" if isinstance(bar, int | float) else "")
    if result.get("rule") == "pp3-v1" and result.get("point_gain") is not None:
        params = result.get("params") or {}
        return (f"gain {fmt_pct(result['point_gain'])}, {params.get('interval', 0.9):.0%} lower bound "
                f"{fmt_pct(result.get('lower_bound'))}, minimum gain {params.get('min_gain', 0):+.2%}")
    return "; ".join(reasons[:1])


def primaries_of(result: Mapping[str, Any], cell_result: Mapping[str, Any]) -> list[str]:
    """A win2-v1 cell's primary metrics in registered order (a recorded result's members may come sorted)."""
    found = [n for n, m in cell_result["metrics"].items() if m["role"] == "primary"]
    registered = (result.get("correction") or {}).get("primaries") or []
    return [n for n in registered if n in found] + [n for n in found if n not in registered]


def _decision_section(result: Mapping[str, Any], ending: Sequence[str] = ()) -> Section:
    blocks: list[Block] = [Para(line, "ending") for line in ending]
    blocks += [Para(f"Decision: {result['decision']} (rule {result['rule']})", "decision"),
               Bullets(tuple(result["reasons"]))]
    literal = (result.get("checklist_literal") or {}).get("decision")
    if literal is not None:
        blocks.append(Para(f"checklist_literal: {literal}: what the decision would have been with ms_per_round "
                           "as the primary (the operator's checklist read literally). Recorded beside the decision, "
                           f"never deciding: the decision is {result['decision']}.", "note"))
    blocks.append(Para("The words used here (HOLD, s1-P / s2-B, guard, bar, MDE, checklist_literal, ...) are "
                       "explained in tally's docs/glossary.md.", "note"))
    return Section("Decision", tuple(blocks))


# --------------------------------------------------------------------------- win2-v1

def _win2_sections(data: Mapping[str, Any], result: Mapping[str, Any], plots: bool) -> list[Section]:
    from .plots import win2_cell_figure

    params = result["params"]
    starts = data["starts"]
    inputs = Table(("input", "value"), (
        ("production clock cap", "not applicable (no GPU clocks on this site)"
         if data["production_clock_cap_mhz"] is None else f"{data['production_clock_cap_mhz']} MHz"),
        *((f"start {s}", f"role {starts[s]['role']}, clock cap "
                         f"{DASH if starts[s]['clock_cap_mhz'] is None else str(starts[s]['clock_cap_mhz']) + ' MHz'}")
          for s in ("s1", "s2", "s3")),
        ("thermal dial-backs inside the HOLD", str(data["thermal_dialbacks_in_hold"])),
        ("decision cells", ", ".join(data["decision_cells"])),
        ("metrics", _metric_roles(result)),
        *_correction_rows(result),
        ("waves counted", _waves_counted(data)),
        ("repeats (registered)", str(params["repeats"])),
        ("bar", f"{params['bar']:.2%} (registered; never changed silently)"),
        ("confidence", f"{params['confidence']:.0%} paired-t interval"),
        ("guard", f"LOSS when the candidate is worse than both controls in >= {params['guard_min_repeats']} "
                  f"of {params['repeats']} repeats"),
        ("input sha256 (JCS)", input_sha256(data)),
    ))
    sections = [Section("Window inputs", (inputs,))]
    stems = _figure_stems(list(result["cells"]))
    for cell, cell_result in result["cells"].items():
        blocks: list[Block] = []
        if plots:
            svg = win2_cell_figure(cell, cell_result, result["spread"][cell], params)
            blocks.append(Figure(f"win2-{stems[cell]}", svg,
                                 f"{cell}: primary and guards per repeat for s1/s2/s3 with the control spread; "
                                 "per-repeat relative differences of the primary with its interval and the +/- bar; "
                                 "every metric's interval; the in-window OFF/OFF and archive spreads."))
        if plots:
            primary = next(iter(primaries_of(result, cell_result)), None)
            if primary is not None and cell_result["metrics"][primary]["point"] is not None:
                from .plots import primary_figure

                m = cell_result["metrics"][primary]
                blocks.insert(0, Figure(f"primary-{stems[cell]}", primary_figure(cell, primary, m, params),
                                        f"{cell}: the primary metric {primary}: its {params['confidence']:.0%} "
                                        f"interval against the +/-{params['bar']:.2%} bar, on a scale fitted to "
                                        "them.", inline=True))
        deciding, reported = [], []
        tested = "correction" in result
        for name, m in cell_result["metrics"].items():
            interval = DASH if m["low"] is None else f"[{fmt_pct(m['low'])}, {fmt_pct(m['high'])}]"
            row = (metric_label(name), m["role"], m["direction"],
                   *(" / ".join(metric_value(name, v) for v in m["per_repeat"][s]) for s in ("s1", "s2", "s3")),
                   _series(m["d"], fmt_pct), fmt_pct(m["point"]), interval)
            if m["role"] == "reported":
                reported.append(row)
            else:
                deciding.append((*row, m["verdict"] or DASH, *((_test_text(m),) if tested else ())))
        header = ("metric (unit)", "role", "better", "s1 per repeat", "s2 per repeat", "s3 per repeat",
                  "d per repeat", "point", f"{params['confidence']:.0%} interval")
        blocks.append(Table((*header, "verdict", *(("p (corrected threshold)",) if tested else ())),
                            tuple(deciding), "Deciding: the primaries and the guards"))
        if reported:
            blocks.append(Table(header, tuple(reported), "Reported only: shown for reading, never deciding"))
        verdict = cell_result["verdict"] or "not computed (incomplete data)"
        sections.append(Section(f"Cell {cell}: {verdict}", tuple(blocks)))

    literal = result["checklist_literal"]
    sections.append(Section("checklist_literal", (
        Para("What the decision would have been had ms_per_round (lower is better) been the primary, with the "
             "same guards and the same window conditions. Recorded, never deciding.", "note"),
        Table(("cell", f"verdict ({', '.join(_registered_primaries(result))} primary)",
               "checklist_literal (ms_per_round primary)"),
              tuple((c, result["cells"][c]["verdict"] or DASH, v or DASH) for c, v in literal["cells"].items())),
        Para(f"checklist_literal decision: {literal['decision']}, had ms_per_round been the primary; the decision "
             f"stands: {result['decision']}."),
    )))
    archive = data.get("archive", [])
    spread_rows = []
    for cell, sp in result["spread"].items():
        entries = sum(1 for e in archive if e["cell"] == cell)
        spread_rows.append((cell, _series(sp["in_window_off_off"], _pct_plain),
                            _pct_plain(sp["archive_day_to_day"]), str(entries)))
    sections.append(Section("Spread: in-window OFF/OFF beside the archive's day-to-day", (
        Table(("cell", "in-window OFF/OFF |s1-s3|/mean per repeat", "archive day-to-day (max-min)/mean",
               "archive entries"), tuple(spread_rows)),
        Para("The archive holds finished control starts of earlier windows (same cell, max_tokens and clock cap); "
             "its spread is null with fewer than two entries.", "note"),
    )))
    return sections


def _registered_primaries(result: Mapping[str, Any]) -> list[str]:
    return list((result.get("correction") or {}).get("primaries") or ["pooled_rate_tps"])


def _metric_roles(result: Mapping[str, Any]) -> str:
    """Which metrics decide (the primaries, the guards) and which are reported only, by their recorded roles."""
    roles: dict[str, list[str]] = {"primary": [], "guard": [], "reported": []}
    for cell in result["cells"].values():
        for name in primaries_of(result, cell):
            if name not in roles["primary"]:
                roles["primary"].append(name)
        for name, m in cell["metrics"].items():
            if name not in roles.setdefault(m["role"], []):
                roles[m["role"]].append(name)
    decide = ", ".join(roles["primary"]) + (f" (primary); guards {', '.join(roles['guard'])}" if roles["guard"] else "")
    return f"decide: {decide or DASH}; reported only: {', '.join(roles['reported']) or 'none'}"


def _correction_rows(result: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Where the plan registers several primaries: how they combine, and the correction registered and applied."""
    c = result.get("correction")
    if not isinstance(c, Mapping):
        return []
    combine = ("WIN when every primary wins" if c["decide"] == "all"
               else "WIN when a primary wins and passes its corrected threshold")
    return [("primaries", f"{', '.join(c['primaries'])}: decide {c['decide']} ({combine})"),
            ("correction", f"registered {c['registered']}; applied: {c['applied']} (alpha {c['alpha']:.4g})")]


def _test_text(m: Mapping[str, Any]) -> str:
    """A primary's p, and where a correction applied its rank, threshold and outcome."""
    test = m.get("test")
    if not isinstance(test, Mapping):
        return DASH
    if "threshold" not in test:
        return f"{test['p']:.4g}"
    return (f"{test['p']:.4g} (rank {test['rank']}, threshold {test['threshold']:.4g}: "
            f"{'passed' if test['passed'] else 'not passed'})")


def _waves_counted(data: Mapping[str, Any]) -> str:
    excluded = len(data.get("excluded_waves") or [])
    note = f" ({excluded} measured wave(s) not counted: see the reasons)" if excluded else ""
    return f"{len(data['waves'])}{note}"


def _pct_plain(value: float | None) -> str:
    return DASH if value is None else f"{value:.2%}"


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text)


def _figure_stems(cells: Sequence[str]) -> dict[str, str]:
    """Each cell's figure file stem: its slug, and where two cells' slugs meet (``a$b``, ``a[b``) a
    short hash of the name too, so no figure overwrites another."""
    slugs = {cell: _slug(cell) for cell in cells}
    taken = Counter(slugs.values())
    return {cell: slug if taken[slug] == 1 else
            f"{slug}-{hashlib.sha256(cell.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"
            for cell, slug in slugs.items()}


# --------------------------------------------------------------------------- pp3-v1

def _pp3_gains(data: Mapping[str, Any], result: Mapping[str, Any]) -> list[float] | None:
    if result["point_gain"] is None:
        return None
    from runner.decide.pp3 import Pp3Params, bootstrap_gains, family_sums, parse

    parsed = parse(dict(data))
    gains = bootstrap_gains(family_sums(parsed.requests), Pp3Params(**result["params"]))
    return [float(g) for g in gains]


def _accepted_rows(result: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Accepted draft tokens per engine round, per arm: a diagnostic (it cannot override the decision)."""
    diagnostics = result.get("diagnostics")
    per_arm = diagnostics.get("accepted_per_round") if isinstance(diagnostics, Mapping) else None
    if not isinstance(per_arm, Mapping):
        return []
    return [(f"accepted/round, arm {arm} (diagnostic)", DASH if value is None else f"{value:.3f}")
            for arm, value in sorted(per_arm.items())]


def _pp3_roles(params: Mapping[str, Any]) -> str:
    """Which pp3-v1 figures decide and which are reported only (docs/rules.md 3.5)."""
    guard = "TPOT" if params.get("guard") == "tpot_ms" else "p95 round-time"
    return (f"decide: point gain (>= minimum gain), bootstrap lower bound (> 0); guards TTFT and {guard} change "
            "per usable pair (<= the regression limit); reported only: per-family gains, distinct resample values, "
            "accepted/round (diagnostic)")


def _pp3_sections(data: Mapping[str, Any], result: Mapping[str, Any], plots: bool) -> list[Section]:
    from .plots import pp3_figure

    params = result["params"]
    k = len(result["per_family"])
    multisets = math.comb(2 * k - 1, k) if k else 0
    summary = Table(("figure", "value"), (
        ("point gain (pooled B / pooled A - 1)", fmt_pct(result["point_gain"])),
        (f"bootstrap {params['interval']:.0%} lower bound", fmt_pct(result["lower_bound"])),
        ("minimum gain", f"{params['min_gain']:+.2%}"),
        ("resamples (seed)", f"{result['resamples']} (seed {params['seed']})"),
        ("distinct resample values", _opt(result["distinct_resamples"])),
        ("source families (clusters)", str(k)),
        ("figures", _pp3_roles(params)),
        *_accepted_rows(result),
        ("input sha256 (JCS)", input_sha256(data)),
    ))
    note = Para(f"Small-family limit: the clusters are the {k} source famil{'y' if k == 1 else 'ies'}, so a resample "
                f"can only be one of {multisets} multisets of families and the bootstrap has at most that many "
                f"distinct values ({DASH if result['distinct_resamples'] is None else result['distinct_resamples']} "
                "here). The lower bound is a quantile of those few values, not of thousands of independent sources.",
                "note")
    blocks: list[Block] = [summary, note]
    if plots:
        blocks.append(Figure("pp3-bootstrap", pp3_figure(result, _pp3_gains(data, result)),
                             "Per pair gains; the bootstrap distribution with its lower bound; TTFT and p95 round-time "
                             "changes per context/family against the regression limit."))
    sections = [Section("Gain and bootstrap", tuple(blocks))]

    table: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for r in data["requests"]:  # a block holds every request of a pair (one per prompt of the order)
        table.setdefault((r["block"], r["family"], r["context"]), []).append(r)
    pair_rows = []
    for label, entry in result["per_pair"].items():
        family, context = label.split("/", 1)
        rates = []
        for block in ("A1", "A2", "B1", "B2"):
            requests = table.get((block, family, context), [])
            tokens = sum(r["delivered_tokens"] or 0 for r in requests)
            seconds = math.fsum(r["decode_s"] or 0.0 for r in requests)
            usable = requests and all(r["delivered_tokens"] is not None and r["decode_s"] for r in requests)
            rates.append(fmt_number(tokens / seconds) if usable and seconds else DASH)
        flags = [what for what, key in (("TTFT", "ttft_change"), ("p95", "round_p95_change"))
                 if entry[key] is not None and entry[key] > params["max_regression"]]
        pair_rows.append((label, *rates, fmt_pct(entry["gain"]), fmt_pct(entry["ttft_change"]),
                          fmt_pct(entry["round_p95_change"]), ", ".join(flags) + " regression" if flags else "ok"))
    sections.append(Section("Per pair (family/context)", (
        Table(("pair", "A1 tok/s", "A2 tok/s", "B1 tok/s", "B2 tok/s", "gain", "TTFT change", "p95 round change",
               f"guard (limit {params['max_regression']:+.0%})"), tuple(pair_rows)),)))
    sections.append(Section("Per family", (
        Table(("family", "pairs", "gain"),
              tuple((f, str(v["pairs"]), fmt_pct(v["gain"])) for f, v in result["per_family"].items())),)))
    request_rows = tuple(
        (r["block"], f"{r['family']}/{r['context']}", r["status"], _opt(r["delivered_tokens"]),
         fmt_number(r["decode_s"]), metric_value("ttft_s", r["ttft_s"]), fmt_number(r["round_ms_p95"]))
        for r in sorted(data["requests"], key=lambda r: (("A1", "B1", "B2", "A2").index(r["block"]), r["family"],
                                                         r["context"])))
    sections.append(Section("Requests (every request, including failed ones)", (
        Table(("block", "pair", "status", "delivered tokens", "decode s", "TTFT ms", "p95 round ms"), request_rows),
        Para(f"admitted (every required gate passed before the window ran): {'yes' if data['gates_passed'] else 'no'}; "
             f"failures: {', '.join(data['failures']) if data['failures'] else 'none'}"),
    )))
    return sections


def _opt(value: Any) -> str:
    return DASH if value is None else str(value)
