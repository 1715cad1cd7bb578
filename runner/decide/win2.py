"""Rule ``win2-v1`` (seed 000, "Decision (win2-v1, paired by repeat)"; ``docs/rules.md``).

Three starts per window: ``s1`` and ``s3`` are the bracketing controls, ``s2`` the
candidate. Per start, decision cell and repeat the repeat's waves (one per source family)
are pooled by summing counters, five metrics are derived, and the candidate is compared
with the mean of the two controls repeat by repeat. ``docs/rules.md`` is the reference.

Pure: no I/O, no clock. ``parse`` validates (``FieldError`` naming the field),
``decide`` computes the result dict whose key names are a contract.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.errors import FieldError

from ..fields import Fields
from ..vocabulary import (
    CORRECTIONS,
    DECIDE_MODES,
    WIN2_METRICS,
    Correction,
    DecideMode,
    MetricRole,
    Win2Decision,
    multiplicity_problem,
)
from .clocks import cap_reasons, dial_back_reasons
from .paired import (
    Direction,
    Verdict,
    effect_verdict,
    mean,
    paired_interval,
    paired_p_value,
    relative_change,
    step_tests,
)

__all__ = [
    "METRICS",
    "RULE",
    "ArchiveEntry",
    "Metric",
    "StartInfo",
    "Wave",
    "Win2Input",
    "Win2Params",
    "decide",
    "parse",
    "pooled_values",
    "roles",
]

RULE = "win2-v1"
STARTS = ("s1", "s2", "s3")
CONTROL_ROLES = ("A", "P")
CANDIDATE_ROLE = "B"
FAMILIES_PER_REPEAT = 2

Decision = Win2Decision


@dataclass(frozen=True)
class Metric:
    name: str
    direction: Direction
    role: MetricRole            # in the decision proper
    literal_role: MetricRole    # in checklist_literal (ms_per_round primary)


METRICS: tuple[Metric, ...] = (
    Metric("pooled_rate_tps", "higher", "primary", "reported"),
    Metric("accepted_per_round", "higher", "guard", "guard"),
    Metric("decode_tps", "higher", "guard", "guard"),
    Metric("ms_per_round", "lower", "reported", "primary"),
    Metric("ttft_s", "lower", "reported", "reported"),
)
_COUNTERS = ("rounds", "accepted", "decode_s")


DEFAULT_PRIMARY = "pooled_rate_tps"


@dataclass(frozen=True)
class Win2Params:
    bar: float = 0.02
    confidence: float = 0.95
    guard_min_repeats: int = 2
    repeats: int = 3
    # Several primaries (docs/rules.md 2.7); None: not registered, the rule decides on pooled_rate_tps alone.
    primaries: tuple[str, ...] | None = None
    correction: Correction | None = None
    decide: DecideMode | None = None

    @property
    def registered_primaries(self) -> bool:
        """The plan registered any of ``primaries``, ``correction``, ``decide`` (the result then says more)."""
        return self.primaries is not None or self.correction is not None or self.decide is not None

    @property
    def deciding(self) -> tuple[str, ...]:
        """The primary metrics, in registered order."""
        return self.primaries if self.primaries is not None else (DEFAULT_PRIMARY,)

    @property
    def mode(self) -> DecideMode:
        return self.decide or "all"

    @property
    def applied(self) -> Correction:
        """The correction applied: the registered one only where a WIN may rest on one of several primaries."""
        return (self.correction or "none") if self.mode == "any" and len(self.deciding) > 1 else "none"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"bar": self.bar, "confidence": self.confidence,
                                "guard_min_repeats": self.guard_min_repeats, "repeats": self.repeats}
        if self.primaries is not None:   # written only when registered: older results keep their bytes
            data["primaries"] = list(self.primaries)
        if self.correction is not None:
            data["correction"] = self.correction
        if self.decide is not None:
            data["decide"] = self.decide
        return data


def roles(params: Win2Params) -> dict[str, MetricRole]:
    """Each metric's role in the decision: a registered primary, else a guard, else reported only.

    Without registered primaries: ``pooled_rate_tps`` primary, ``accepted_per_round`` and
    ``decode_tps`` guards, ``ms_per_round`` and ``ttft_s`` reported. A guard registered as a
    primary is a primary (not also a guard); ``pooled_rate_tps`` left out of the primaries
    is reported only.
    """
    out: dict[str, MetricRole] = {}
    for m in METRICS:
        out[m.name] = "primary" if m.name in params.deciding else "guard" if m.role == "guard" else "reported"
    return out


@dataclass(frozen=True)
class StartInfo:
    role: str
    clock_cap_mhz: int | None


@dataclass(frozen=True)
class Wave:
    index: int            # position in the input's ``waves`` list (for messages)
    start: str
    cell: str
    repeat: int
    family: str
    rounds: int | None
    accepted: int | None
    decode_s: float | None
    ttft_s: tuple[float, ...]
    client_tokens_after_first: int
    client_decode_s: float


@dataclass(frozen=True)
class ArchiveEntry:
    cell: str
    pooled_rate_tps: float


@dataclass(frozen=True)
class Win2Input:
    params: Win2Params
    decision_cells: tuple[str, ...]
    production_clock_cap_mhz: int | None  # None: GPU clocks do not apply on the site
    starts: Mapping[str, StartInfo]
    thermal_dialbacks_in_hold: int
    waves: tuple[Wave, ...]
    archive: tuple[ArchiveEntry, ...]
    excluded: tuple[str, ...] = ()
    smoke: tuple[str, ...] = ()   # smoke failures a plan registers as making the decision INCONCLUSIVE
    pressure: tuple[str, ...] = ()   # waves over the plan's [pressure] limits (measuring stopped there)


CLOCKS_NOT_APPLICABLE = "not applicable: the site has no GPU clocks, so the clock-cap reasons do not apply"

# --------------------------------------------------------------------------- parsing

def parse(data: Any) -> Win2Input:
    """Validate a ``win2-v1`` input; raise ``FieldError`` naming the first bad field."""
    f = Fields(data, "", dialect="json")
    f.string("rule", choices=(RULE,))
    params = _params(f.table("params"))
    cells = f.strings("decision_cells", nonempty=True)
    if not cells:
        raise f.fail("decision_cells", "expected at least one cell")
    production_cap = f.integer("production_clock_cap_mhz", low=1, nullable=True)
    starts = _starts(f.table("starts", required=True))
    thermal = f.integer("thermal_dialbacks_in_hold", low=0)
    waves = tuple(_wave(w, i, params) for i, w in enumerate(f.tables("waves")))
    _check_duplicates(waves)
    archive = tuple(_archive_entry(e, production_cap) for e in f.tables("archive", required=False))
    excluded = f.strings("excluded_waves", (), nonempty=True, unique=False)
    smoke = f.strings("smoke_failures", (), nonempty=True, unique=False)
    pressure = f.strings("pressure", (), nonempty=True, unique=False)
    f.string("accepted_basis", None, nonempty=True)   # input builder 4: what each wave's accepted is
    f.done()
    return Win2Input(params, tuple(cells), production_cap, starts, thermal, waves, archive, tuple(excluded),
                     tuple(smoke), tuple(pressure))


def _params(f: Fields) -> Win2Params:
    d = Win2Params()
    bar = f.number("bar", d.bar, low=0)
    confidence = f.number("confidence", d.confidence, low=0, high=1, low_open=True, high_open=True)
    repeats = f.integer("repeats", d.repeats, low=2, high=1000)
    guard = f.integer("guard_min_repeats", d.guard_min_repeats, low=1, high=repeats)
    primaries = f.strings("primaries", choices=WIN2_METRICS) if f.has("primaries") else None
    if primaries is not None and not primaries:
        raise f.fail("primaries", "expected at least one metric")
    correction = f.string("correction", choices=CORRECTIONS) if f.has("correction") else None
    decide = f.string("decide", choices=DECIDE_MODES) if f.has("decide") else None
    problem = multiplicity_problem(len(primaries or (DEFAULT_PRIMARY,)), correction or "none", decide or "all")
    if problem is not None:
        raise f.fail(*problem)
    f.done()
    return Win2Params(float(bar), float(confidence), guard, repeats, primaries, correction, decide)


def _starts(f: Fields) -> dict[str, StartInfo]:
    starts: dict[str, StartInfo] = {}
    for name in STARTS:
        entry = f.table(name, required=True)
        roles = (CANDIDATE_ROLE,) if name == "s2" else CONTROL_ROLES
        role = entry.string("role", choices=roles)
        cap = entry.integer("clock_cap_mhz", low=1, nullable=True)
        entry.done()
        starts[name] = StartInfo(role, cap)
    f.done()
    if starts["s1"].role != starts["s3"].role:
        raise f.fail("s3.role", f"expected the same control role as s1 ({starts['s1'].role!r})")
    return starts


def _wave(f: Fields, index: int, params: Win2Params) -> Wave:
    start = f.string("start", choices=STARTS)
    cell = f.string("cell", nonempty=True)
    repeat = f.integer("repeat", low=1, high=params.repeats)
    family = f.string("family", nonempty=True)
    rounds = f.integer("rounds", low=0, nullable=True)
    accepted = f.integer("accepted", low=0, nullable=True)
    if f.has("accepted_counted"):  # input builder 4: the server's raw count beside the delivered one (not read)
        f.integer("accepted_counted", low=0, nullable=True)
    decode_s = f.number("decode_s", low=0, nullable=True)
    ttft = f.numbers("ttft_s", low=0)
    tokens = f.integer("client_tokens_after_first", low=0)
    client_decode = f.number("client_decode_s", low=0)
    for key in ("wave", "seed"):
        f.integer(key, None, low=0)
    f.done()
    return Wave(index, start, cell, repeat, family, rounds, accepted, decode_s, ttft, tokens, client_decode)


def _check_duplicates(waves: tuple[Wave, ...]) -> None:
    seen: dict[tuple[str, str, int, str], int] = {}
    for w in waves:
        key = (w.start, w.cell, w.repeat, w.family)
        if key in seen:
            raise FieldError(f"waves[{w.index}]", f"duplicate of waves[{seen[key]}] ({w.start} {w.cell} "
                                                  f"repeat {w.repeat} family {w.family})")
        seen[key] = w.index


def _archive_entry(f: Fields, production_cap: int | None) -> ArchiveEntry:
    cell = f.string("cell", nonempty=True)
    rate = f.number("pooled_rate_tps", low=0, low_open=True)
    for key in ("window", "start"):
        f.string(key, None, nonempty=True)
    cap = f.integer("clock_cap_mhz", None, low=1)
    if cap is not None and production_cap is None:
        raise f.fail("clock_cap_mhz", f"{cap}, but clocks do not apply (production_clock_cap_mhz is null)")
    if cap is not None and cap != production_cap:
        raise f.fail("clock_cap_mhz", f"{cap} differs from production_clock_cap_mhz {production_cap} "
                                      "(the archive holds same-clock controls only)")
    f.done()
    return ArchiveEntry(cell, rate)


# --------------------------------------------------------------------------- pooling

def pooled_values(rounds: int | None, accepted: int | None, decode_s: Sequence[float] | None,
                  tokens_after_first: int, client_decode_s: Sequence[float],
                  ttft_s: Sequence[float]) -> dict[str, float | None]:
    """The five win2-v1 metrics of pooled waves (``None`` where not computable).

    ``pooled_rate_tps = (R + A) / D``, ``accepted_per_round = A / R``, ``ms_per_round =
    1000 D / R`` from the summed server counters (``D`` the fsum of the waves' decode
    seconds); ``decode_tps`` = client tokens after the first / fsum of the client decode
    seconds; ``ttft_s`` the mean TTFT. The one place these formulas are written: the
    rule, the archive and the reports all use it.
    """
    decode = None if decode_s is None else math.fsum(decode_s)
    client = math.fsum(client_decode_s)
    have_rd = rounds is not None and rounds > 0 and decode is not None and decode > 0
    return {
        "pooled_rate_tps": (rounds + accepted) / decode
        if have_rd and accepted is not None and rounds is not None and decode is not None else None,
        "accepted_per_round": accepted / rounds if accepted is not None and rounds else None,
        "decode_tps": tokens_after_first / client if client > 0 else None,
        "ms_per_round": 1000 * decode / rounds if have_rd and decode is not None and rounds else None,
        "ttft_s": mean(ttft_s) if ttft_s else None,
    }


@dataclass(frozen=True)
class _Pooled:
    """One (start, cell, repeat): its metric values (``None`` = not computable) and what is missing."""

    values: Mapping[str, float | None]
    missing: tuple[str, ...]


def _pool(waves: list[Wave], families: tuple[str, ...], where: str) -> _Pooled:
    by_family = {w.family: w for w in waves}
    absent = [f for f in families if f not in by_family]
    if absent:
        return _Pooled(dict.fromkeys(m.name for m in METRICS),
                       tuple(f"{where}: no wave for family {f}" for f in absent))
    ordered = [by_family[f] for f in families]
    if not ordered:
        return _Pooled(dict.fromkeys(m.name for m in METRICS), (f"{where}: no waves",))
    missing: list[str] = []
    for w in ordered:
        for counter in _COUNTERS:
            if getattr(w, counter) is None:
                missing.append(f"{where}: counter {counter} missing (family {w.family})")
    rounds = None if any(w.rounds is None for w in ordered) else sum(w.rounds or 0 for w in ordered)
    accepted = None if any(w.accepted is None for w in ordered) else sum(w.accepted or 0 for w in ordered)
    decode = None if any(w.decode_s is None for w in ordered) else [w.decode_s or 0.0 for w in ordered]
    client_decode = [w.client_decode_s for w in ordered]
    ttft = [t for w in ordered for t in w.ttft_s]

    if rounds == 0:
        missing.append(f"{where}: rounds is zero")
    if decode is not None and math.fsum(decode) == 0:
        missing.append(f"{where}: decode_s is zero")
    if math.fsum(client_decode) == 0:
        missing.append(f"{where}: client_decode_s is zero")
    if not ttft:
        missing.append(f"{where}: no TTFT values")
    values = pooled_values(rounds, accepted, decode, sum(w.client_tokens_after_first for w in ordered),
                           client_decode, ttft)
    return _Pooled(values, tuple(missing))


# --------------------------------------------------------------------------- deciding

def decide(inp: Win2Input) -> dict[str, Any]:
    """The ``win2-v1`` result (its key names are a contract: ``docs/rules.md``)."""
    p = inp.params
    repeats = range(1, p.repeats + 1)
    decision_waves = [w for w in inp.waves if w.cell in inp.decision_cells]
    families = tuple(sorted({w.family for w in decision_waves}))
    grouped: dict[tuple[str, str, int], list[Wave]] = {}
    for w in decision_waves:
        grouped.setdefault((w.start, w.cell, w.repeat), []).append(w)

    inconclusive = cap_reasons({s: inp.starts[s].clock_cap_mhz for s in STARTS}, inp.production_clock_cap_mhz, "starts")
    inconclusive.extend(f"missing data: wave not counted ({why})" for why in inp.excluded)
    inconclusive.extend(f"smoke: {why}" for why in inp.smoke)
    inconclusive.extend(f"pressure: {why}" for why in inp.pressure)
    inconclusive += dial_back_reasons(inp.thermal_dialbacks_in_hold)
    if len(families) != FAMILIES_PER_REPEAT:
        inconclusive.append(f"missing data: a repeat pools {FAMILIES_PER_REPEAT} waves, one per source family; "
                            f"the decision cells have {len(families)} famil{'y' if len(families) == 1 else 'ies'}"
                            + (f" ({', '.join(families)})" if families else ""))

    role_of = roles(p)
    cells_out: dict[str, Any] = {}
    literal_cells: dict[str, str | None] = {}
    spread: dict[str, Any] = {}
    cell_lines: list[str] = []
    verdicts: dict[str, str | None] = {}
    for cell in inp.decision_cells:
        pooled = {(s, r): _pool(grouped.get((s, cell, r), []), families, f"{s} {cell} repeat {r}")
                  for r in repeats for s in STARTS}
        missing = [m for r in repeats for s in STARTS for m in pooled[(s, r)].missing]
        inconclusive.extend(f"missing data: {m}" for m in missing)
        complete = not missing and len(families) == FAMILIES_PER_REPEAT
        metrics = {m.name: _metric(m, role_of[m.name], pooled, p, complete) for m in METRICS}
        if p.registered_primaries and complete:
            _record_tests(metrics, p)
        verdict, why = _cell_verdict(metrics, p.deciding, complete, p, p.mode if p.registered_primaries else None)
        literal_metrics = {m.name: _metric(m, m.literal_role, pooled, p, complete) for m in METRICS}
        literal, _ = _cell_verdict(literal_metrics, ("ms_per_round",), complete, p)
        if complete and verdict is None:
            zero = [n for n in p.deciding if metrics[n]["point"] is None]
            inconclusive.append(f"missing data: {cell}: {', '.join(zero)} has a zero control value")
        cells_out[cell] = {"verdict": verdict, "metrics": metrics}
        literal_cells[cell] = literal
        verdicts[cell] = verdict
        cell_lines.extend(f"{cell}: {line}" for line in why)
        spread[cell] = _spread(cell, pooled, inp.archive, repeats)

    decision = _aggregate(verdicts, bool(inconclusive))
    literal_decision = _aggregate(literal_cells, bool(inconclusive))
    result: dict[str, Any] = {
        "rule": RULE,
        "decision": decision,
        "reasons": [*inconclusive, *([_correction_line(p)] if p.registered_primaries else []), *cell_lines,
                    _summary(decision, verdicts)],
        "cells": cells_out,
        "checklist_literal": {"decision": literal_decision, "cells": literal_cells},
        "spread": spread,
        "params": p.to_json(),
    }
    if inp.production_clock_cap_mhz is None:
        result["clocks"] = CLOCKS_NOT_APPLICABLE
    if p.registered_primaries:   # members of a plan that registers primaries; older results keep their bytes
        result["roles"] = dict(role_of)
        result["correction"] = _correction_record(p)
    return result


NONE_NEEDED = {
    "all": "none needed: decide = all, a WIN needs every primary to win at the registered confidence "
           "(an intersection-union test keeps its level without a correction)",
    "one": "none needed: one primary",
}


def _applied_text(p: Win2Params) -> str:
    """What was applied, in words: the correction's name, or why none was needed."""
    if p.applied != "none":
        return p.applied
    return NONE_NEEDED["one"] if len(p.deciding) == 1 else NONE_NEEDED["all"]


def _correction_record(p: Win2Params) -> dict[str, Any]:
    """The result's ``correction`` member: what was registered, what was applied, at which level."""
    return {"primaries": list(p.deciding), "decide": p.mode, "registered": p.correction or "none",
            "applied": _applied_text(p), "alpha": 1 - p.confidence}


def _correction_line(p: Win2Params) -> str:
    return (f"primaries {', '.join(p.deciding)}: decide {p.mode}, correction {p.correction or 'none'} "
            f"registered, applied: {_applied_text(p)}")


def _record_tests(metrics: Mapping[str, dict[str, Any]], p: Win2Params) -> None:
    """Add each primary's ``test``: its two-sided p, and where a correction applies its rank, threshold, outcome."""
    names = [n for n in p.deciding if all(x is not None for x in metrics[n]["d"])]
    p_values = [paired_p_value(metrics[n]["d"]) for n in names]
    for name, value in zip(names, p_values, strict=True):
        metrics[name]["test"] = {"p": value}
    if p.applied == "none" or len(names) != len(p.deciding):
        return
    for name, step in zip(names, step_tests(p_values, 1 - p.confidence, p.applied), strict=True):
        metrics[name]["test"].update(rank=step.rank, threshold=step.threshold, passed=step.passed)


def _metric(m: Metric, role: MetricRole, pooled: Mapping[tuple[str, int], _Pooled], p: Win2Params,
            complete: bool) -> dict[str, Any]:
    repeats = range(1, p.repeats + 1)
    per_repeat = {s: [pooled[(s, r)].values[m.name] for r in repeats] for s in STARTS}
    d: list[float | None] = []
    for r in range(p.repeats):
        s1, s2, s3 = (per_repeat[s][r] for s in STARTS)
        d.append(None if s1 is None or s2 is None or s3 is None else relative_change(s2, (s1 + s3) / 2))
    out: dict[str, Any] = {"role": role, "direction": m.direction, "per_repeat": per_repeat, "d": d,
                           "point": None, "low": None, "high": None, "verdict": None}
    if not complete:
        return out
    if all(x is not None for x in d):
        interval = paired_interval([x for x in d if x is not None], p.confidence)
        out.update(point=interval.point, low=interval.low, high=interval.high)
        if role != "guard":
            out["verdict"] = effect_verdict(interval, p.bar, m.direction)
    if role == "guard":
        worse = _guard_worse(per_repeat, m.direction)
        out["verdict"] = "LOSS" if worse >= p.guard_min_repeats else "OK"
    return out


def _guard_worse(per_repeat: Mapping[str, list[float | None]], direction: Direction) -> int:
    """Repeats in which the candidate is worse than both controls."""
    worse = 0
    for s1, s2, s3 in zip(per_repeat["s1"], per_repeat["s2"], per_repeat["s3"], strict=True):
        assert s1 is not None and s2 is not None and s3 is not None
        if (s2 < min(s1, s3)) if direction == "higher" else (s2 > max(s1, s3)):
            worse += 1
    return worse


def _cell_verdict(metrics: Mapping[str, Mapping[str, Any]], primaries: Sequence[str], complete: bool,
                  p: Win2Params, mode: DecideMode | None = None) -> tuple[Verdict | None, list[str]]:
    """LOSS if a primary or a guard says LOSS, else what the primaries say; with the lines saying why.

    ``mode`` ``None``: one primary, decided as the rule always has (its verdict). ``"all"``:
    WIN when every primary wins. ``"any"``: WIN when a primary wins and passes its corrected
    threshold (where a correction applies).
    """
    if not complete:
        return None, []
    lines: list[str] = []
    guard_loss = False
    for name, m in metrics.items():
        if m["role"] == "guard" and m["verdict"] == "LOSS":
            guard_loss = True
            worse = _guard_worse(m["per_repeat"], m["direction"])
            side = "below" if m["direction"] == "higher" else "above"
            lines.append(f"LOSS by guard {name}: candidate {side} both controls in {worse} of {p.repeats} "
                         f"repeats (LOSS from {p.guard_min_repeats})")
    found: list[Verdict] = []
    for name in primaries:
        pm = metrics[name]
        if pm["verdict"] is None:
            return None, lines
        found.append(pm["verdict"])
        test = _describe_test(pm.get("test"))
        lines.insert(len(found) - 1, f"{name} {pm['verdict']} ({_describe(pm, p)}{test})")
    if mode is None:
        verdict: Verdict = found[0]
    elif "LOSS" in found:
        verdict = "LOSS"
    elif mode == "all":
        verdict = "WIN" if all(v == "WIN" for v in found) else "NO_CHANGE"
    else:
        verdict = "WIN" if any(_wins(metrics[n], p) for n in primaries) else "NO_CHANGE"
    return ("LOSS" if guard_loss else verdict), lines


def _wins(m: Mapping[str, Any], p: Win2Params) -> bool:
    """A primary's WIN under decide = any: its effect verdict, and its corrected test where one applies
    (fail closed: a correction applied and no recorded pass is no WIN)."""
    if m["verdict"] != "WIN":
        return False
    if p.applied == "none":
        return True
    test = m.get("test") or {}
    return test.get("passed") is True


def _describe_test(test: Mapping[str, Any] | None) -> str:
    if not test:
        return ""
    if "threshold" not in test:
        return f"; p {test['p']:.4g}"
    outcome = "passed" if test["passed"] else "not passed"
    return f"; p {test['p']:.4g}, rank {test['rank']}, threshold {test['threshold']:.4g}: {outcome}"


def _describe(m: Mapping[str, Any], p: Win2Params) -> str:
    return (f"point {m['point']:+.2%}, {p.confidence:.0%} interval [{m['low']:+.2%}, {m['high']:+.2%}], "
            f"bar {p.bar:.2%}, {m['direction']} is better")


def _aggregate(verdicts: Mapping[str, str | None], inconclusive: bool) -> Decision:
    if inconclusive or any(v is None for v in verdicts.values()):
        return "INCONCLUSIVE"
    values = list(verdicts.values())
    if "LOSS" in values:
        return "LOSS"
    if all(v == "WIN" for v in values):
        return "WIN"
    return "NO_CHANGE"


def _summary(decision: Decision, verdicts: Mapping[str, str | None]) -> str:
    listed = ", ".join(f"{c} {v or 'not computed'}" for c, v in verdicts.items())
    if decision == "INCONCLUSIVE":
        return f"decision INCONCLUSIVE (cells: {listed})"
    if decision == "LOSS":
        return f"decision LOSS: a decision cell is LOSS ({listed})"
    if decision == "WIN":
        return f"decision WIN: every decision cell is WIN ({listed})"
    return f"decision NO_CHANGE: no cell LOSS, not every cell WIN ({listed})"


def _spread(cell: str, pooled: Mapping[tuple[str, int], _Pooled], archive: tuple[ArchiveEntry, ...],
            repeats: range) -> dict[str, Any]:
    off_off: list[float | None] = []
    for r in repeats:
        s1 = pooled[("s1", r)].values["pooled_rate_tps"]
        s3 = pooled[("s3", r)].values["pooled_rate_tps"]
        centre = None if s1 is None or s3 is None else (s1 + s3) / 2
        off_off.append(None if s1 is None or s3 is None or not centre else abs(s1 - s3) / centre)
    rates = [e.pooled_rate_tps for e in archive if e.cell == cell]
    day = (max(rates) - min(rates)) / mean(rates) if len(rates) >= 2 else None
    return {"in_window_off_off": off_off, "archive_day_to_day": day}
