"""What a window's events say beside its decision: every gate result, missing counters, repeats.

The rule's report (``sections.py``) shows what the rule computed from its input; a window's
report also shows what the window's events say that the input does not: every gate result
recorded for the window, required or not, FAILs first in the eye; a banner when waves had
no server counters (so a win2 cell that shows few or no waves says why); and the plan's
registered repeats. Read from the events, never from a cache.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..decide.smoke import smoke_tally
from ..events import payloads as pl
from ..events import read_payload
from .document import Bullets, Para, Section, Table
from .units import fixed

if TYPE_CHECKING:
    from ledger.event import Event

    from ..plan.model import Plan

__all__ = ["WindowEvidence", "window_evidence"]


@dataclass(frozen=True)
class WindowEvidence:
    gates: tuple[tuple[str, ...], ...]   # gate, start, verdict, required, seq, summary
    banners: tuple[str, ...]
    facts: tuple[tuple[str, str], ...]   # plan facts the rule's input does not carry
    contention: tuple[tuple[str, ...], ...] = ()  # per start: load and server gauges around its waves
    phases: tuple[tuple[str, ...], ...] = ()      # per start: cold start, prefill (priming) and decode, apart
    smoke: tuple[tuple[str, ...], ...] = ()  # start, probe, outcome, kind, position, margin, seq, summary

    requests: tuple[tuple[str, ...], ...] = ()  # per arm: arm, starts, ok, bounded, incomplete, failed
    # per arm, where the server streamed reasoning apart: requests, reasoning and answer tokens, TTFT and first answer
    reasoning: tuple[tuple[str, ...], ...] = ()

    def head_sections(self) -> list[Section]:
        """Banners, shown right under the decision, then the request counts per arm."""
        out = [Section("Attention", (Bullets(self.banners),))] if self.banners else []
        if self.requests:
            out.append(Section("Requests per arm", (
                Table(("arm", "starts", "ok", "bounded", "incomplete", "failed"), self.requests),
                Para("Every measured request of the window's waves: ok and bounded (cut by the plan's decode bound, "
                     "an observation) are counted; incomplete (censored by a deadline, timed out, cancelled, lost) "
                     "and failed requests are not.", "note"),
            )))
        return out

    def sections(self) -> list[Section]:
        out = [Section("Gates (every result recorded for the window)", (
            Table(("gate", "start", "verdict", "required", "seq", "summary"), self.gates),
            Para("Every gate.result of the window in seq order, required or not: a later PASS does not hide an "
                 "earlier FAIL.", "note"),
        ))]
        if self.contention:
            out.append(Section("Contention and exclusivity (per start, over its waves)", (
                Table(("start", "waves", "host load 1 min (min-max)", "CPUs", "server running before a wave (max)",
                       "server waiting (max)", "KV-cache usage (max)"), self.contention),
                Para("Read before and after every wave: the runner host's load average and the server's own gauges. "
                     "On a drained host nothing else runs: requests already running before a wave, or a load above "
                     "the CPU count, are other work competing with the measurement.", "note"),
            )))
        if self.phases:
            out.append(Section("Cold start, prefill and decode (per start)", (
                Table(("start", "warm-up TTFT cold / warm ms", "priming prefill cold / primed ms", "priming",
                       "decode runs", "run TTFT ms (mean)", "run decode s (mean)"), self.phases),
                Para("Reported apart: the engine's cold start (warm-up), the prefill of each context (the block's "
                     "priming requests: the first cold, the repeats from the prefix cache), and the decode runs "
                     "(their TTFT, then their decode time, which a decode bound counts from the first token).",
                     "note"),
            )))
        if self.reasoning:
            out.append(Section("Reasoning and answer tokens (per arm, diagnostic)", (
                Table(("arm", "requests with reasoning", "reasoning tokens (mean)", "answer tokens (mean)",
                       "TTFT ms (median)", "first answer token ms (median)"), self.reasoning),
                Para("Where the server streams reasoning apart from the answer (vLLM's reasoning parser): the "
                     "delivered tokens split into reasoning and answer, and the time to the first token (reasoning "
                     "or answer) beside the time to the first visible answer token. A diagnostic: the decision "
                     "counts every delivered token and never reads these figures.", "note"),
            )))
        if self.smoke:
            out.append(Section("Smoke stage (T=0 probes on the smoke starts)", (
                Table(("start", "probe", "outcome", "kind", "position", "top-2 margin", "seq", "summary"), self.smoke),
                Para("Each probe's exchanges and emitted sequences are its smoke.result's evidence blob. A near tie "
                     "is a greedy divergence within the registered margin: reported, not a failure unless "
                     "registered to be.", "note"),
            )))
        if self.facts:
            out.append(Section("Registered plan", (Table(("plan field", "value"), self.facts),)))
        return out


def _gate_rows(plan: Plan, events: Iterable[Event]) -> tuple[tuple[str, ...], ...]:
    """Every gate result of the window; a FAIL that a later PASS of the same gate (and start) superseded
    says so, and is not called to attention (a gate tried again and passed is not a problem)."""
    required = set(plan.required_gates)
    results = [e for e in events if e.type == "gate.result"]
    rows = []
    for index, event in enumerate(results):
        g = read_payload(event, pl.GateResult)
        verdict = str(g.verdict)
        if verdict == "FAIL":
            later = next((e for e in results[index + 1:] if (h := read_payload(e, pl.GateResult)).gate == g.gate
                          and h.start == g.start and h.verdict == "PASS"), None)
            if later is not None:
                verdict = f"FAIL, superseded by PASS at seq {later.seq}"
        rows.append((str(g.gate), str(g.start or "-"), verdict,
                     "yes" if g.gate in required else "no", str(event.seq), _clip(str(g.summary or ""))))
    return tuple(rows)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _counter_banners(events: Sequence[Event]) -> list[str]:
    waves = [read_payload(e, pl.WaveMeasured) for e in events if e.type == "wave.measured"]
    if not waves:
        return ["no wave was measured"]
    without = [w for w in waves if w.counters_missing]
    if not without:
        return []
    reasons = sorted({str(reason) for w in without for reason in w.counters_missing})
    shown = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    return [f"server counters unavailable for {len(without)} of {len(waves)} waves ({shown}): rules that decide "
            "on engine counters could not count those waves"]


def _gate_banners(rows: Sequence[tuple[str, ...]]) -> list[str]:
    failed = [r for r in rows if r[2] == "FAIL"]
    if not failed:
        return []
    names = ", ".join(f"{r[0]}{'' if r[1] == '-' else ' ' + r[1]} (seq {r[4]})" for r in failed)
    return [f"{len(failed)} gate result(s) FAILed: {names}"]


def _numbers(values: Iterable[object]) -> list[float]:
    return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]


def _span(values: list[float]) -> str:
    return "-" if not values else f"{min(values):.2f}-{max(values):.2f}"


def _top(values: list[float], fmt: str = "{:g}") -> str:
    return "-" if not values else fmt.format(max(values))


def _contention(events: Sequence[Event]) -> tuple[list[tuple[str, ...]], list[str]]:
    """Per start: host load and server gauges around its waves; banners for contention and non-exclusivity."""
    by_start: dict[str, list[pl.WaveMeasured]] = {}
    for e in events:
        if e.type == "wave.measured":
            wave = read_payload(e, pl.WaveMeasured)
            by_start.setdefault(str(wave.start), []).append(wave)
    rows: list[tuple[str, ...]] = []
    banners: list[str] = []
    for start, waves in by_start.items():
        loads: list[float] = []
        cpus: list[float] = []
        running: list[float] = []
        waiting: list[float] = []
        kv: list[float] = []
        for w in waves:   # host load and gauges are absent in older waves
            load, gauges = w.host_load, w.gauges
            for reading in (load.before, load.after) if load is not None else ():
                loads.extend(_numbers(reading[:1] if reading else ()))
            for side in (gauges.before, gauges.after) if gauges is not None else ():
                waiting.extend(_numbers([side.waiting if side else None]))
                kv.extend(_numbers([side.kv_cache_usage if side else None]))
            cpus.extend(_numbers([load.cpus if load is not None else None]))
            running.extend(_numbers([gauges.before.running if gauges is not None and gauges.before else None]))
        if not loads and not running and not waiting and not kv:
            continue
        rows.append((start, str(len(waves)), _span(loads), _top(cpus), _top(running), _top(waiting),
                     _top(kv, "{:.1%}")))
        if loads and cpus and max(loads) > max(cpus):
            banners.append(f"host load average up to {max(loads):.2f} on {max(cpus):g} CPUs during start {start}: "
                           "other work competed with the measurement")
        if running and max(running) > 0:
            banners.append(f"the server had {max(running):g} request(s) running before a wave of start {start}: "
                           "the drained host was not exclusive to the window")
    return rows, banners


def _mean(values: Sequence[float], factor: float = 1.0) -> str:
    return fixed(factor * sum(values) / len(values), 3) if values else "-"


def _ms(seconds: object) -> str:
    """Seconds as milliseconds (fixed notation), ``-`` when not a number."""
    return fixed(float(seconds) * 1000, 3) if isinstance(seconds, int | float) and not isinstance(seconds, bool) \
        else "-"


@dataclass
class _Phase:
    warmup: str = "-"
    cold: list[float] = field(default_factory=list)      # priming prefill, first repeat
    primed: list[float] = field(default_factory=list)    # priming prefill, later repeats (prefix cache)
    priming: str = "none registered"
    ttft: list[float] = field(default_factory=list)      # the decode runs' TTFT
    decode: list[float] = field(default_factory=list)    # the decode runs' decode seconds
    statuses: list[str] = field(default_factory=list)

    def row(self, start: str) -> tuple[str, ...]:
        counts = ", ".join(f"{self.statuses.count(s)} {s}" for s in sorted(set(self.statuses)))
        prefill = f"{_mean(self.cold, 1000)} / {_mean(self.primed, 1000)}" if self.cold else "-"
        return (start, self.warmup, prefill, self.priming, counts or "-", _mean(self.ttft, 1000), _mean(self.decode))


def _phases(events: Sequence[Event]) -> tuple[list[tuple[str, ...]], list[str]]:
    """Per start: warm-up TTFTs, priming prefill (first repeat, later repeats), the decode runs' TTFT and decode."""
    starts: dict[str, _Phase] = {}
    banners: list[str] = []
    for event in events:
        if event.type not in ("warmup.done", "priming.done", "wave.measured"):
            continue
        if event.type == "warmup.done":
            warm = read_payload(event, pl.WarmupDone)
            starts.setdefault(str(warm.start), _Phase()).warmup = f"{_ms(warm.cold_ttft_s)} / {_ms(warm.warm_ttft_s)}"
        elif event.type == "priming.done":
            primed = read_payload(event, pl.PrimingDone)
            phase = starts.setdefault(str(primed.start), _Phase())
            phase.cold += _numbers(r.ttft_s for r in primed.requests if r.repeat == 1)
            phase.primed += _numbers(r.ttft_s for r in primed.requests if r.repeat != 1)
            phase.priming = "verified" if primed.ok else "NOT verified"
            banners += [f"priming of start {primed.start} did not verify: {why}" for why in primed.failures]
        else:
            wave = read_payload(event, pl.WaveMeasured)
            phase = starts.setdefault(str(wave.start), _Phase())
            phase.ttft += _numbers(r.ttft_s for r in wave.requests)
            phase.decode += _numbers(r.decode_s for r in wave.requests)
            phase.statuses += [str(r.status) for r in wave.requests]
    return [phase.row(start) for start, phase in starts.items()], banners


def _smoke(plan: Plan, events: Sequence[Event]) -> tuple[list[tuple[str, ...]], list[str]]:
    """The smoke stage's results, and banners for its failures, near ties and probes that did not run."""
    rows: list[tuple[str, ...]] = []
    banners: list[str] = []
    tally = smoke_tally(plan, events)
    for result in tally.results:
        s = result.recorded
        margin = s.margin
        rows.append((result.start, result.probe, str(s.outcome), str(s.kind),
                     "-" if s.position is None else str(s.position),
                     "-" if not isinstance(margin, int | float) else f"{margin:.4f}", str(result.event.seq),
                     _clip(str(s.summary or ""))))
        if s.outcome in ("fail", "near_tie", "not_exercised", "interrupted"):  # a near tie: whatever the plan says
            what = {"near_tie": "near tie", "not_exercised": "probe not exercised",
                    "interrupted": "probe after the stop signal (not counted)"}.get(str(s.outcome), f"{s.kind} failure")
            banners.append(f"smoke {what}: {_clip(str(s.summary or ''))}")
    if tally.counts and tally.missing:
        banners.append(f"registered smoke probes that did not run: "
                       f"{', '.join(f'{probe} on {start}' for start, probe in tally.missing)}")
    return rows, banners


_COUNTED = ("ok", "bounded", "incomplete", "failed")


def _request_counts(plan: Plan, events: Sequence[Event]) -> tuple[tuple[str, ...], ...]:
    """Per arm (in the plan's order): its starts and its wave requests by outcome."""
    role_of = {start.id: start.role for start in plan.starts}
    counts: dict[str, dict[str, int]] = {}
    starts: dict[str, list[str]] = {}
    for event in events:
        if event.type != "wave.measured":
            continue
        wave = read_payload(event, pl.WaveMeasured)
        start = str(wave.start)
        role = role_of.get(start)
        if role is None:
            continue
        tally = counts.setdefault(role, dict.fromkeys(_COUNTED, 0))
        if start not in starts.setdefault(role, []):
            starts[role].append(start)
        for request in wave.requests:
            status = str(request.status)
            tally[status if status in ("ok", "bounded", "failed") else "incomplete"] += 1
    rows = []
    for arm in plan.arms:
        if arm.role in counts:
            c = counts[arm.role]
            rows.append((f"{arm.role} {arm.name}", ", ".join(starts[arm.role]), *(str(c[k]) for k in _COUNTED)))
    return tuple(rows)


def _median_ms(values: Sequence[float]) -> str:
    return _ms(statistics.median(values)) if values else "-"


def _reasoning(plan: Plan, events: Sequence[Event]) -> tuple[tuple[str, ...], ...]:
    """Per arm (in the plan's order), over its wave requests the server streamed reasoning for: how many, their
    mean reasoning and answer tokens, median TTFT and median time to the first answer token."""
    role_of = {start.id: start.role for start in plan.starts}
    seen: dict[str, list[pl.RequestSummary]] = {}
    for event in events:
        if event.type != "wave.measured":
            continue
        wave = read_payload(event, pl.WaveMeasured)
        role = role_of.get(str(wave.start))
        if role is not None:
            seen.setdefault(role, []).extend(r for r in wave.requests if r.reasoning_tokens is not None)
    rows = []
    for arm in plan.arms:
        requests = seen.get(arm.role)
        if requests:
            rows.append((f"{arm.role} {arm.name}", str(len(requests)),
                         _mean(_numbers(r.reasoning_tokens for r in requests)),
                         _mean(_numbers(r.answer_tokens for r in requests)),
                         _median_ms(_numbers(r.ttft_s for r in requests)),
                         _median_ms(_numbers(r.first_answer_s for r in requests))))
    return tuple(rows)


def window_evidence(plan: Plan, events: Sequence[Event]) -> WindowEvidence:
    """The evidence section of ``plan``'s window from its events (``events``: the window's stream)."""
    gates = _gate_rows(plan, events)
    contention, busy = _contention(events)
    phases, unprimed = _phases(events)
    facts: list[tuple[str, str]] = [
        ("repeats", str(plan.measurement.repeats)),
        ("production clock cap", "not applicable (no GPU clocks)" if plan.production_clock_cap_mhz is None
         else f"{plan.production_clock_cap_mhz} MHz"),
        ("arms", "; ".join(f"{a.role} {a.name}: " + ("no speculative decoding" if a.speculative is None
                                                     else "speculative") for a in plan.arms)),
        ("cells", ", ".join(f"{c.name} ({c.context}, {c.tokens} tokens, concurrency {c.concurrency})"
                            for c in plan.cells)),
    ]
    if plan.measurement.decode_bound_s is not None:
        facts.append(("decode bound", f"{plan.measurement.decode_bound_s:g} s after the first token (bounded runs)"))
    if plan.priming is not None:
        facts.append(("priming", f"{plan.priming.requests} identical request(s) per prompt and block, occupied "
                                 f"tokens within {plan.priming.tolerance_tokens} of the declared size"))
    smoke, smoke_banners = _smoke(plan, events)
    return WindowEvidence(gates, tuple(_gate_banners(gates) + smoke_banners + _counter_banners(events) + busy
                                       + unprimed), tuple(facts), tuple(contention), tuple(phases), tuple(smoke),
                          _request_counts(plan, events), _reasoning(plan, events))

