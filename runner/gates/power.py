"""The ``power`` gate and ``tally window power``: what the registered design can detect, before any host contact.

The spread comes from the control archive (``archive.control_start`` events of other
windows, selected by ``comparable``) or from a pilot file (``docs/power.md``). For each
comparable archive entry the archived window's own ``wave.measured`` events give the
control start's per-repeat rates (pooled as the rule pools them), and two control starts
of one window over the same repeats are one matched pair of the spread estimate
(``runner.decide.spread``).

The gate FAILs closed when a decision cell's spread rests on fewer archived windows with
both control starts than the plan's ``[power] min_windows`` (the number needed is
stated), and otherwise PASSes when P(WIN) (pp3-v1: P(CANDIDATE)) at the registered effect
is at least ``min_power``. Its evidence holds every figure and the archive events it
rests on, so ``replay_power_gate`` recomputes it from the ledger, bit for bit.

The evidence names the power model (``model``, ``runner.decide.power.MODEL``); a recorded
result without one was computed by model 1 (``runner.decide.power_v1``) and is replayed
by it. Model 2 also reads the archived windows' guards (accepted per round from the
counters, the client decode rate from the waves' client figures) and the start offsets'
correlation across cells; a correlation the archive is too thin for is said in the
summary and assumed at its conservative value figure by figure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger.errors import PolicyError

from ..decide import NOISE_METRICS as METRICS
from ..decide import NOISE_PRIMARY as PRIMARY
from ..decide import POWER_MODEL as MODEL
from ..decide import (
    ControlPair,
    Pp3Noise,
    Win2Design,
    Win2Noise,
    correlation_label,
    design_of,
    estimate_win2_noise,
    parse_pilot_noise,
    power_figures,
    power_figures_v1,
    thin_reason,
)
from ..decide.spread import MIN_WINDOWS, Spread, estimate_spread, parse_pilot
from ..decide.win2 import pooled_values
from ..plan.model import Power
from ..vocabulary import GateVerdict
from .gate import Finding

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.keys import Signer
    from ledger.store import Ledger

    from ..plan.model import Plan
    from .record import GateOutcome

__all__ = ["ArchiveNoise", "PowerCheck", "PowerGate", "archive_noise", "archive_spreads", "check_power", "comparable",
           "power_gate", "replay_power_gate"]


def comparable(plan: Plan, entry: Mapping[str, Any]) -> bool:
    """An archive entry (``archive.control_start`` payload) another window of this plan may compare with.

    The archive's comparability key (``runner.state.archive.comparability_key``) less the
    production commit, which a window learns only from its own snapshot, after the gate:
    the same decision cell, control configuration digest, clock cap and max_tokens, another
    window, and no thermal dial-back during the start (excluded from day-to-day spread).
    """
    from ..plan.model import CONTROL_ROLE
    from ..state.archive import comparability_key

    key = comparability_key(entry)
    return (entry.get("window") != plan.window_id and key.cell in plan.decision_cells
            and key.control_config_digest == plan.arm(CONTROL_ROLE[plan.mode]).config_digest
            and key.max_tokens == plan.sampling.max_tokens and key.clock_cap_mhz == plan.production_clock_cap_mhz
            and not entry.get("dial_back"))


@dataclass(frozen=True)
class ArchiveSpreads:
    spreads: dict[str, Spread | None]   # per decision cell; None: no matched pair
    entries: dict[str, int]             # comparable archive entries per cell
    windows: dict[str, int]             # archived windows with both control starts per cell
    used: tuple[Event, ...]             # the archive events, seq order


@dataclass(frozen=True)
class ArchiveNoise:
    spreads: dict[str, Spread | None]   # the primary's, per decision cell; None: no matched pair
    noise: Win2Noise | None             # the whole model (None: a cell has no primary spread)
    entries: dict[str, int]
    windows: dict[str, int]
    used: tuple[Event, ...]


def archive_spreads(ledger: Ledger, plan: Plan, until: int | None = None) -> ArchiveSpreads:
    """The spread of every decision cell from the comparable archive entries recorded before ``until``."""
    walk = _control_pairs(ledger, plan, until, _per_repeat, (PRIMARY,))
    pairs = {c: [([float(x or 0) for x in p.first[PRIMARY]], [float(x or 0) for x in p.second[PRIMARY]])
                 for p in walk.pairs[c]] for c in plan.decision_cells}
    spreads = {c: estimate_spread(pairs[c], source="archive", entries=walk.entries[c]) for c in plan.decision_cells}
    return ArchiveSpreads(spreads, walk.entries, walk.windows, walk.used)


def archive_noise(ledger: Ledger, plan: Plan, until: int | None = None) -> ArchiveNoise:
    """Model 2's noise of every decision cell from the comparable archive entries recorded before ``until``."""
    walk = _control_pairs(ledger, plan, until, _per_repeat_metrics, METRICS)
    spreads, noise = estimate_win2_noise(plan.decision_cells, walk.pairs, source="archive", entries=walk.entries)
    return ArchiveNoise(spreads, noise, walk.entries, walk.windows, walk.used)


_PerRepeat = Callable[[Sequence[Mapping[str, Any]]], dict[int, dict[str, float | None]]]


@dataclass(frozen=True)
class _Pairs:
    """The matched control pairs of every decision cell and the archive events they rest on."""

    pairs: dict[str, list[ControlPair]]
    entries: dict[str, int]             # comparable archive entries (native and imported) per cell
    used: tuple[Event, ...]             # seq order

    @property
    def windows(self) -> dict[str, int]:
        return {c: len(p) for c, p in self.pairs.items()}


def _control_pairs(ledger: Ledger, plan: Plan, until: int | None, per_repeat: _PerRepeat,
                   metrics: Sequence[str]) -> _Pairs:
    """Every archived window's first two control starts of a cell, matched repeat by repeat (``per_repeat``:
    a start's values by repeat from its waves), then the imported rows' likewise (their ``metrics``)."""
    events = [e for e in ledger.events(stream="archive", types=["archive.control_start"], until=until)
              if comparable(plan, e.payload)]
    by_window: dict[str, list[Event]] = {}
    for event in events:
        by_window.setdefault(str(event.payload.get("window")), []).append(event)
    pairs: dict[str, list[ControlPair]] = {c: [] for c in plan.decision_cells}
    for window, archived in by_window.items():
        waves = [e.payload for e in ledger.events(stream=f"window/{window}", types=["wave.measured"], until=until)]
        for cell in plan.decision_cells:
            starts = sorted({str(e.payload.get("start")) for e in archived if e.payload.get("cell") == cell})
            if len(starts) < 2:
                continue
            first, second = (per_repeat([w for w in waves if w.get("start") == s and w.get("cell") == cell])
                             for s in starts[:2])
            units = sorted(set(first) & set(second))
            if units:
                pairs[cell].append(ControlPair(window, {m: [first[u][m] for u in units] for m in metrics},
                                               {m: [second[u][m] for u in units] for m in metrics}))
    entries = {c: sum(1 for e in events if e.payload.get("cell") == c) for c in plan.decision_cells}
    imported = _imported(ledger, plan, until)
    for window, cells in imported.starts.items():
        for cell, by_start in cells.items():
            if len(by_start) < 2:
                continue
            one, two = (by_start[s] for s in sorted(by_start)[:2])
            count = min(len(one[PRIMARY]), len(two[PRIMARY]))
            matched = [u for u in range(count) if one[PRIMARY][u] and two[PRIMARY][u]]
            if matched:
                pairs[cell].append(ControlPair(window, {m: [_at(one, m, u) for u in matched] for m in metrics},
                                               {m: [_at(two, m, u) for u in matched] for m in metrics}))
    return _Pairs(pairs, {c: entries[c] + imported.entries[c] for c in plan.decision_cells},
                  _in_order(events, imported.used))


def _counted(waves: Sequence[Mapping[str, Any]]) -> Iterator[tuple[int, list[Mapping[str, Any]],
                                                                     list[Mapping[str, Any]]]]:
    """The repeats of one start and cell with a counted wave per family and complete counters: each with its
    waves and their counters."""
    families = sorted({w["family"] for w in waves})
    for repeat in sorted({w["repeat"] for w in waves}):
        chosen = [w for w in waves if w["repeat"] == repeat]
        counters = [w.get("counters") or {} for w in chosen]
        if sorted(w["family"] for w in chosen) == families and _complete(chosen, counters):
            yield repeat, chosen, counters


def _per_repeat(waves: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, float | None]]:
    """Repeat -> the pooled rate of one start and cell (model 1: the rate alone)."""
    out: dict[int, dict[str, float | None]] = {}
    for repeat, _, counters in _counted(waves):
        rate = pooled_values(sum(c["rounds"] for c in counters), sum(c["accepted"] for c in counters),
                             [c["decode_s"] for c in counters], 0, [1.0], [0.0])[PRIMARY]
        if rate is not None:
            out[repeat] = {PRIMARY: rate}
    return out


def _per_repeat_metrics(waves: Sequence[Mapping[str, Any]]) -> dict[int, dict[str, float | None]]:
    """Repeat -> the rate, accepted per round and client decode rate of one start and cell (model 2).

    The repeats ``_per_repeat`` counts; the client decode rate is ``None`` where a wave lacks
    its client figures.
    """
    out: dict[int, dict[str, float | None]] = {}
    for repeat, chosen, counters in _counted(waves):
        clients: list[Mapping[str, Any]] = [w["client"] if isinstance(w.get("client"), Mapping) else {} for w in chosen]
        have_client = all(_number(c.get("tokens_after_first")) and _number(c.get("decode_s")) for c in clients)
        values = pooled_values(sum(c["rounds"] for c in counters), sum(c["accepted"] for c in counters),
                               [c["decode_s"] for c in counters],
                               int(sum(c["tokens_after_first"] for c in clients)) if have_client else 0,
                               [float(c["decode_s"]) for c in clients] if have_client else [0.0], [0.0])
        if values[PRIMARY] is not None:
            out[repeat] = {m: values[m] for m in METRICS}
    return out


def _complete(waves: Sequence[Mapping[str, Any]], counters: Sequence[Mapping[str, Any]]) -> bool:
    return all(w.get("complete", True) for w in waves) and all(
        _number(c.get(k)) for c in counters for k in ("rounds", "accepted", "decode_s"))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class _Imported:
    """Imported archive rows that compare with a plan's control and carry their per-repeat values."""

    # window -> cell -> start -> its per_repeat values
    starts: dict[str, dict[str, dict[str, Mapping[str, Sequence[float | None]]]]]
    entries: dict[str, int]
    used: list[Event]


def _imported(ledger: Ledger, plan: Plan, until: int | None) -> _Imported:
    """The rows of ``archive.imported`` events comparable with ``plan``'s control that have ``per_repeat``.

    They count exactly as a native control start and its waves do: a window's first two starts of
    a cell are a pair, matched repeat by repeat. Rows without ``per_repeat`` (one figure per
    start) cannot show a repeat-to-repeat spread and are left out, as before they could carry it.
    """
    starts: dict[str, dict[str, dict[str, Mapping[str, Sequence[float | None]]]]] = {}
    entries = dict.fromkeys(plan.decision_cells, 0)
    used: list[Event] = []
    for event in ledger.events(stream="archive", types=["archive.imported"], until=until):
        took = False
        for row in event.payload.get("rows") or ():
            per_repeat = row.get("per_repeat")
            if not isinstance(per_repeat, Mapping) or not comparable(plan, row):
                continue
            window = f"{event.payload.get('window')}/{row.get('window')}"   # never one of a native window's
            starts.setdefault(window, {}).setdefault(str(row["cell"]), {})[str(row.get("start"))] = per_repeat
            entries[str(row["cell"])] += 1
            took = True
        if took:
            used.append(event)
    return _Imported(starts, entries, used)


def _in_order(events: Sequence[Event], more: Sequence[Event]) -> tuple[Event, ...]:
    return tuple(sorted([*events, *more], key=lambda e: e.seq))


def _at(per_repeat: Mapping[str, Sequence[float | None]], metric: str, unit: int) -> float | None:
    values = per_repeat.get(metric)
    return None if values is None or unit >= len(values) else values[unit]


@dataclass(frozen=True)
class PowerCheck:
    verdict: GateVerdict
    summary: str
    evidence: dict[str, Any]


def check_power(ledger: Ledger, plan: Plan, *, effect: float | None = None, target: float | None = None,
                windows: int | None = None, seed: int | None = None, pilot: Any = None,
                until: int | None = None, search: bool = True, model: int = MODEL) -> PowerCheck:
    """The power figures of ``plan`` and the gate's verdict on them (``pilot``: a parsed pilot document).

    ``model``: the power model (a recorded result's own, to replay it; 1 is the old one).
    """
    if model == 1:
        return _check_power_v1(ledger, plan, effect=effect, target=target, windows=windows, seed=seed, pilot=pilot,
                               until=until, search=search)
    if model != MODEL:
        raise PolicyError(f"power model {model} is not known (this tally knows 1 and {MODEL})")
    power = plan.power or Power(effect=float(design_bar(plan)), min_windows=MIN_WINDOWS)
    effect = power.effect if effect is None else effect
    target = power.min_power if target is None else target
    n = power.windows if windows is None else windows
    seed = power.seed if seed is None else seed
    design = design_of(plan)
    cells = plan.decision_cells if plan.protocol == "win2-v1" else ("pairs",)
    evidence: dict[str, Any] = {"model": MODEL, "effect": effect, "min_power": target,
                                "min_windows": power.min_windows,
                                "spread_from": "pilot" if pilot is not None else "archive", "until_seq": until}
    primaries = plan.decision.get("primaries")
    if isinstance(primaries, list | tuple) and list(primaries) != ["pooled_rate_tps"]:
        summary = (f"FAIL (closed): the power model covers pooled_rate_tps alone, and this plan decides on "
                   f"{', '.join(map(str, primaries))} (decide {plan.decision.get('decide', 'all')}, correction "
                   f"{plan.decision.get('correction', 'none')}): its power cannot be shown; decide on "
                   "pooled_rate_tps alone, or leave the power gate out")
        return PowerCheck("FAIL", summary, dict(evidence, needed_windows=power.min_windows, entries={}))
    noise: Win2Noise | Pp3Noise | None
    if pilot is not None:
        contexts = design.contexts if not isinstance(design, Win2Design) else ()
        read = parse_pilot_noise(pilot, cells, protocol=plan.protocol, contexts=contexts)
        noise = read.win2 if read.win2 is not None else read.pp3
    else:
        if plan.protocol != "win2-v1":
            summary = "FAIL (closed): pp3-v1 windows write no control archive; the spread needs a pilot file"
            return PowerCheck("FAIL", summary, dict(evidence, needed_windows=power.min_windows, entries={}))
        arch = archive_noise(ledger, plan, until)
        evidence["archive"] = {"entries": arch.entries, "windows": arch.windows,
                               "seqs": [e.seq for e in arch.used], "hashes": [e.hash for e in arch.used]}
        short = {c: arch.windows[c] for c in cells if arch.windows[c] < power.min_windows or arch.spreads[c] is None}
        if short or arch.noise is None:
            need = "; ".join(f"{c}: {arch.entries[c]} comparable entries, {w} window(s) with both control starts"
                             for c, w in short.items())
            wanted = f"{power.min_windows} archived window{'s' if power.min_windows != 1 else ''}"
            summary = (f"FAIL (closed): the archive is too thin ({need}); {wanted} with both control starts per "
                       f"decision cell ({2 * power.min_windows} entries) are needed")
            return PowerCheck("FAIL", summary, dict(evidence, needed_windows=power.min_windows,
                                                    needed_entries=2 * power.min_windows))
        noise = arch.noise
    assert noise is not None
    figures = power_figures(design, noise, effect=effect, target=target, windows=n, seed=seed, search=search)
    evidence["figures"] = figures
    verdict: GateVerdict = "PASS" if figures["power"] >= target else "FAIL"
    return PowerCheck(verdict, f"{verdict}: {describe(figures)}", evidence)


def _check_power_v1(ledger: Ledger, plan: Plan, *, effect: float | None = None, target: float | None = None,
                windows: int | None = None, seed: int | None = None, pilot: Any = None,
                until: int | None = None, search: bool = True) -> PowerCheck:
    """Model 1's check (the code every gate result without a ``model`` member was computed by)."""
    power = plan.power or Power(effect=float(design_bar(plan)), min_windows=MIN_WINDOWS)
    effect = power.effect if effect is None else effect
    target = power.min_power if target is None else target
    n = power.windows if windows is None else windows
    seed = power.seed if seed is None else seed
    cells = plan.decision_cells if plan.protocol == "win2-v1" else ("pairs",)
    arch: ArchiveSpreads | None = None
    evidence: dict[str, Any] = {"effect": effect, "min_power": target, "min_windows": power.min_windows,
                                "spread_from": "pilot" if pilot is not None else "archive", "until_seq": until}
    if pilot is not None:
        spreads: dict[str, Spread | None] = dict(parse_pilot(pilot, cells))
        short: dict[str, int] = {}
    else:
        if plan.protocol != "win2-v1":
            summary = "FAIL (closed): pp3-v1 windows write no control archive; the spread needs a pilot file"
            return PowerCheck("FAIL", summary, dict(evidence, needed_windows=power.min_windows, entries={}))
        arch = archive_spreads(ledger, plan, until)
        spreads = dict(arch.spreads)
        evidence["archive"] = {"entries": arch.entries, "windows": arch.windows,
                               "seqs": [e.seq for e in arch.used], "hashes": [e.hash for e in arch.used]}
        short = {c: arch.windows[c] for c in cells if arch.windows[c] < power.min_windows or spreads[c] is None}
    if short and arch is not None:
        need = "; ".join(f"{c}: {arch.entries[c]} comparable entries, {w} window(s) with both control starts"
                         for c, w in short.items())
        wanted = f"{power.min_windows} archived window{'s' if power.min_windows != 1 else ''}"
        summary = (f"FAIL (closed): the archive is too thin ({need}); {wanted} with both control starts per "
                   f"decision cell ({2 * power.min_windows} entries) are needed")
        return PowerCheck("FAIL", summary, dict(evidence, needed_windows=power.min_windows,
                                                needed_entries=2 * power.min_windows))
    design = design_of(plan)
    chosen = [s for s in (spreads[c] for c in cells) if s is not None]
    figures = power_figures_v1(design, chosen, effect=effect, target=target, windows=n, seed=seed, search=search)
    evidence["figures"] = figures
    verdict: GateVerdict = "PASS" if figures["power"] >= target else "FAIL"
    return PowerCheck(verdict, f"{verdict}: {describe(figures)}", evidence)


def design_bar(plan: Plan) -> float:
    key = "bar" if plan.protocol == "win2-v1" else "min_gain"
    value: Any = plan.decision_params.get(key, 0.02 if key == "bar" else 0.05)
    return float(value)


def describe(figures: Mapping[str, Any]) -> str:
    """One line: the power at the effect, the MDE, what is needed, what it rests on."""
    positive = "WIN" if figures["rule"] == "win2-v1" else "CANDIDATE"
    target = figures["target_power"]
    mde = figures["mde"]
    unit = "repeats" if figures["rule"] == "win2-v1" else "pairs"
    have = figures["design"]["repeats" if unit == "repeats" else "pairs"]
    line = (f"P({positive}) {figures['power']:.3f} at a true {figures['effect']:+.2%} "
            f"({'>=' if figures['power'] >= target else '<'} {target:g}); MDE at {target:.0%} power "
            + (f"{mde:.2%}" if mde is not None else "none up to +100%") + f" with {have} {unit}")
    needed = figures.get("needed")
    if needed is not None:
        count = needed.get(unit)
        line += (f"; {count} {unit} bring it to {figures['effect']:.2%}" if count is not None
                 else f"; {needed.get('note')}")
    spreads = list(figures["spread"].values()) if figures["rule"] == "win2-v1" else [figures["spread"]]
    source = spreads[0]["source"]
    rests = (f"{figures['entries']} archive entries" if source == "archive"
             else f"a pilot ({min(s['windows'] for s in spreads)} windows)" if source == "pilot"
             else "the window's own control starts")
    line += f"; false-{positive} rate {figures['false_positive_rate']:.3f}"
    if "false_loss_rate" in figures:
        line += f", false-LOSS rate {figures['false_loss_rate']:.3f}"
    line += f"; spread from {rests}"
    thin = (figures.get("conservative") or {}).get("thin") or []
    if thin:
        correlations = figures.get("correlations") or {}
        said = ", ".join(f"{correlation_label(t)}: {thin_reason(correlations.get(t, {}))}" for t in thin)
        line += f"; correlations assumed ({said}), the conservative value for each figure"
    return line


@dataclass(frozen=True)
class PowerGate:
    """The gate: the plan's ``[power]`` on the control archive up to now, or on a pilot file's bytes (kept as
    a blob of the gate result)."""

    pilot: bytes | None = None

    def check(self, ledger: Ledger, plan: Plan) -> Finding:
        from ledger.store import Blob
        from ledger.strictjson import read_json

        until = ledger.size()
        document = None if self.pilot is None else read_json(self.pilot, "pilot file")
        result = check_power(ledger, plan, pilot=document, until=until)
        blobs = []
        evidence = dict(result.evidence)
        if self.pilot is not None:
            blob = Blob(self.pilot, "application/json")
            evidence["pilot"] = blob.ref()
            blobs.append(blob)
        return Finding("power", result.verdict, result.summary, evidence, commit=plan.commit, blobs=tuple(blobs))


def power_gate(ledger: Ledger, signer: Signer, window: str, *, pilot: bytes | None = None) -> GateOutcome:
    """Check and record the power gate (:class:`PowerGate`)."""
    from .record import run_gate

    return run_gate(ledger, signer, window, PowerGate(pilot))


def replay_power_gate(ledger: Ledger, event: Event) -> list[str]:
    """Recompute a recorded power gate result from the ledger; the members that differ (empty: MATCH)."""
    from ledger.strictjson import read_json

    from ..decide.compare import diff
    from ..plan.register import registered_plan

    p = event.payload
    plan = registered_plan(ledger, str(p.get("window"))).plan
    evidence = p.get("evidence") or {}
    pilot = None
    if evidence.get("pilot"):
        blob = ledger.blob(str(evidence["pilot"]["blob"]).removeprefix("sha256:"))
        if blob is None:
            raise PolicyError(f"gate.result at seq {event.seq}: its pilot blob is missing")
        pilot = read_json(blob.data, "pilot blob")
    model = evidence.get("model", 1)   # a result recorded before the model was versioned: model 1
    if not isinstance(model, int) or isinstance(model, bool):
        raise PolicyError(f"gate.result at seq {event.seq}: evidence.model is not a model number")
    again = check_power(ledger, plan, pilot=pilot, until=evidence.get("until_seq"), model=model)
    recomputed = dict(again.evidence)
    if "pilot" in evidence:
        recomputed["pilot"] = evidence["pilot"]
    return [str(d) for d in diff({"verdict": p.get("verdict"), "evidence": evidence},
                                 {"verdict": again.verdict, "evidence": recomputed})]
