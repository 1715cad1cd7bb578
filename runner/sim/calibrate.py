"""Calibrating the step model from measured waves (``tally sim calibrate``), and predicting waves with it.

Input: ``tally measure --out DIR`` runs (``summary.json`` and ``requests.jsonl``), each
named by the arm it measured. Per arm the fit takes every successful request:

- its mean decode step time (decode time over its rounds: chunk gaps when chunks are
  engine steps, else tokens after the first over ``1 + accepted per round``), against the
  batch it ran in (how many requests were decoding beside it, from the records' chunk
  times), the tokens each step scheduled (``1 + drafts`` per request) and the context
  read: least squares for ``fixed + per_token x tokens + per_kv x KV``, a cost the data
  cannot separate (no spread in its column) folded into the fixed one and said;
- its TTFT at concurrency 1 (no queue) against its prompt tokens: the prefill costs;
- the most requests ever seen decoding at once: ``max_num_seqs`` when it stays below the
  concurrency measured (a server that serves one request at a time shows 1);
- per family, the acceptance: the per-position rate ``q`` whose mean accepted per round
  ``q + ... + q^k`` matches the counters, and a Beta concentration from the per-request
  spread where chunks are engine steps.

:func:`predict` replays a run's workload (its prompts' token counts, ``max_tokens`` and
concurrency) on the twin (:func:`.batch.simulate`) and :func:`compare` gives the relative
error of each figure (per-request median and p95 of TPOT, ITL and TTFT, and accepted per
round). Too little data is one :class:`FormatError` line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ledger.errors import FormatError
from ledger.strictfile import read_limited
from ledger.strictjson import read_json

from .batch import Acceptance, Budgets, Job, SimResult, StepCosts, percentile, simulate
from .config import ArmConfig, SimConfig, config_from_dict

__all__ = [
    "FIGURES",
    "MIN_REQUESTS",
    "Calibration",
    "Run",
    "arm_model",
    "calibrate",
    "compare",
    "config_toml",
    "observed_figures",
    "predict",
    "read_run",
]

MAX_SUMMARY_BYTES = 64 << 20
MAX_RECORDS_BYTES = 256 << 20
MAX_RECORDS = 200_000
MIN_REQUESTS = 3        # successful requests a run needs to count
FIGURES = ("tpot_ms", "itl_ms", "ttft_ms", "accepted_per_round")


@dataclass(frozen=True)
class Request:
    """One successful request of a run, as the fit reads it (seconds from its run's first send)."""

    send: float
    chunks: tuple[float, ...]          # chunk arrival offsets from send (s)
    chunk_tokens: tuple[int, ...]
    tokens: int
    prompt_tokens: int | None
    tpot_ms: float | None

    @property
    def ttft_ms(self) -> float:
        return self.chunks[0] * 1000.0

    @property
    def decode_span(self) -> tuple[float, float]:
        return self.send + self.chunks[0], self.send + self.chunks[-1]

    def token_gaps_ms(self) -> list[float]:
        """Per-token intervals: a chunk of n tokens is n - 1 zero gaps after its arrival gap."""
        gaps: list[float] = []
        for i in range(1, len(self.chunks)):
            gaps.append((self.chunks[i] - self.chunks[i - 1]) * 1000.0)
            gaps.extend([0.0] * max(0, self.chunk_tokens[i] - 1))
        return gaps


@dataclass(frozen=True)
class Run:
    """One measured wave: the arm it ran on, its family and concurrency, its requests and counters."""

    arm: str
    path: str
    family: str
    concurrency: int
    max_tokens: int
    chunks_are_steps: bool
    counter_source: str
    rounds: int | None               # decode steps (docs/measure.md "Counter sources")
    draft_tokens: int | None
    accepted: int | None
    requests: tuple[Request, ...]
    drafts: int | None = None        # the decode steps that drafted (None: the source does not say; rounds)

    @property
    def accepted_per_round(self) -> float | None:
        """Accepted tokens per decode step (what a step emits beyond its one token)."""
        if not self.rounds or self.accepted is None:
            return None
        return self.accepted / self.rounds

    @property
    def depth(self) -> float:
        """Mean draft tokens a decode step schedules (0 without speculative decoding)."""
        if not self.rounds or not self.draft_tokens:
            return 0.0
        return self.draft_tokens / self.rounds

    @property
    def drafting_rounds(self) -> int | None:
        return self.drafts if self.drafts else self.rounds


def _member(data: Mapping[str, Any], *path: str) -> Any:
    value: Any = data
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def read_run(arm: str, directory: str | Path) -> Run:
    """One ``tally measure --out`` directory, read as hostile input (bounded; one line on anything wrong)."""
    base = Path(directory)
    where = f"{arm}={base}"
    summary = read_json(read_limited(base / "summary.json", f"{where}: summary.json", MAX_SUMMARY_BYTES),
                        f"{where}: summary.json", max_bytes=MAX_SUMMARY_BYTES)
    wave = _member(summary, "wave")
    if not isinstance(wave, dict):
        raise FormatError(f"{where}: summary.json has no wave (not a tally measure --out directory)")
    concurrency = _int(wave.get("concurrency"))
    max_tokens = _int(wave.get("max_tokens"))
    if not concurrency or not max_tokens:
        raise FormatError(f"{where}: summary.json's wave lacks concurrency or max_tokens")
    counters: dict[str, Any] = wave["counters"] if isinstance(wave.get("counters"), dict) else {}
    source: dict[str, Any] = wave["counter_source"] if isinstance(wave.get("counter_source"), dict) else {}
    raw = read_limited(base / "requests.jsonl", f"{where}: requests.jsonl", MAX_RECORDS_BYTES)
    lines = raw.splitlines()
    if len(lines) > MAX_RECORDS:
        raise FormatError(f"{where}: requests.jsonl has more than {MAX_RECORDS} lines")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record = read_json(line, f"{where}: requests.jsonl line {number}", max_bytes=MAX_RECORDS_BYTES)
        if not isinstance(record, dict):
            raise FormatError(f"{where}: requests.jsonl line {number}: not an object")
        records.append(record)
    sends = [r["send_t"] for r in records if isinstance(r.get("send_t"), (int, float))]
    first = min(sends) if sends else 0.0
    requests = []
    for record in records:
        chunks = record.get("chunk_t")
        if record.get("status") != "ok" or not isinstance(chunks, list) or not chunks:
            continue
        if not all(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 for t in chunks):
            raise FormatError(f"{where}: a record's chunk_t is not a list of non-negative seconds")
        counts = record.get("chunk_token_counts")
        if not isinstance(counts, list) or len(counts) != len(chunks) or not all(_int(c) for c in counts):
            counts = [1] * len(chunks)
        usage = record.get("usage")
        prompt = _int(usage.get("prompt_tokens")) if isinstance(usage, dict) else None
        tpot = record.get("tpot_ms")
        send = record.get("send_t")
        if not isinstance(send, (int, float)) or not math.isfinite(send):
            raise FormatError(f"{where}: a successful record has no send_t")
        requests.append(Request(float(send) - first, tuple(float(t) for t in chunks),
                                tuple(int(c) for c in counts), _int(record.get("delivered_tokens")) or sum(counts),
                                prompt, float(tpot) if isinstance(tpot, (int, float)) else None))
    requests.sort(key=lambda r: r.send)
    return Run(arm, str(base), str(wave.get("family") or ""), concurrency, max_tokens,
               bool(source.get("chunks_are_steps", True)), str(source.get("name") or "vllm"),
               _int(counters.get("rounds")), _int(counters.get("draft_tokens")), _int(counters.get("accepted")),
               tuple(requests), _int(counters.get("drafts")))


# ---------------------------------------------------------------------- the fit


@dataclass
class ArmFit:
    """What the fit found for one arm."""

    arm: str
    k: int
    costs: StepCosts
    max_num_seqs: int
    families: dict[str, Acceptance]
    token_burst_ms: float
    notes: list[str] = field(default_factory=list)
    step_residual: float = 0.0       # relative RMS of the decode-step regression
    ttft_residual: float = 0.0       # relative RMS of the prefill regression
    draft_rate: float = 1.0          # the share of decode steps that drafted (drafting steps / decode steps)
    step_jitter: float = 0.0         # the relative spread of one decode step's time about the model's

    def acceptance(self) -> Acceptance:
        if not self.families:
            return Acceptance(0.0)
        rates = [a.rate for a in self.families.values()]
        conc = [a.concentration for a in self.families.values()]
        return Acceptance(sum(rates) / len(rates), sum(conc) / len(conc))


@dataclass
class Calibration:
    """The fitted twin: its config, each arm's fit, and the residuals per run."""

    config: SimConfig
    arms: dict[str, ArmFit]
    residuals: list[dict[str, Any]]
    table: dict[str, Any]        # what the twin's file sets (the rest keeps its defaults, or a demo's)

    def to_json(self) -> dict[str, Any]:
        return {
            "arms": {name: {"k": fit.k, "fixed_ms": fit.costs.fixed_ms, "per_token_ms": fit.costs.per_token_ms,
                            "prefill_fixed_ms": fit.costs.prefill_fixed_ms,
                            "per_prefill_token_ms": fit.costs.per_prefill_token_ms,
                            "per_kv_token_us": fit.costs.per_kv_token_us, "max_num_seqs": fit.max_num_seqs,
                            "token_burst_ms": fit.token_burst_ms, "draft_rate": fit.draft_rate,
                            "step_jitter": fit.step_jitter,
                            "families": {f: {"rate": a.rate, "concentration": a.concentration}
                                         for f, a in fit.families.items()},
                            "step_residual": fit.step_residual, "ttft_residual": fit.ttft_residual,
                            "notes": list(fit.notes)} for name, fit in self.arms.items()},
            "residuals": self.residuals,
        }


def _context(request: Request) -> float:
    """The mean context a request's decode steps read (prompt and half its output)."""
    return (request.prompt_tokens or 0) + request.tokens / 2.0


def _overlap(run: Run, request: Request) -> tuple[float, float, list[Request]]:
    """During ``request``'s decode: the mean number of requests decoding (itself included), the mean context
    they read together, and the other requests whose prefill ended inside it (their prefill steps)."""
    start, end = request.decode_span
    span = end - start
    if span <= 0:
        return 1.0, _context(request), []
    shared = 0.0
    kv = _context(request)
    prefills = []
    for other in run.requests:
        if other is request:
            continue
        o_start, o_end = other.decode_span
        part = max(0.0, min(end, o_end) - max(start, o_start)) / span
        shared += part
        kv += part * _context(other)
        if start < o_start < end:
            prefills.append(other)
    return 1.0 + shared, kv, prefills


def _max_decoding(run: Run) -> int:
    """The most requests decoding at one moment (a shared edge of less than 1 ms does not count)."""
    events = []
    for r in run.requests:
        start, end = r.decode_span
        if end - start > 0.002:
            events += [(start + 0.001, 1), (end - 0.001, -1)]
    events.sort()
    most = now = 0
    for _t, delta in events:
        now += delta
        most = max(most, now)
    return max(most, 1)


def _rounds(run: Run, request: Request) -> float:
    if run.chunks_are_steps and not run.depth:
        # one token a step: a chunk of several is steps a stream that fell behind got at once (vLLM merges them)
        return float(request.tokens - request.chunk_tokens[0])
    if run.chunks_are_steps:
        return float(len(request.chunks) - 1)
    per_round = 1.0 + (run.accepted_per_round or 0.0)
    return max(1.0, (request.tokens - 1) / per_round)


OUTLIER = 5.0   # a point whose residual is over this many times the median one is left out of a fit


def _lstsq(columns: list[list[float]], target: list[float], names: list[str],
           notes: list[str]) -> tuple[list[float], float]:
    """:func:`_nonnegative_lstsq`, then once more without the outliers: points whose residual is over
    ``OUTLIER`` times the median one (a request the host stalled: a 678 ms TTFT among 46-94 ms ones set a
    vLLM engine's prefill at twice its cost), where at least ``2 x MIN_REQUESTS`` points remain (noted).
    The relative RMS returned is the kept points'."""
    first: list[str] = []
    out, rms = _nonnegative_lstsq(columns, target, names, first)
    y = np.array(target, dtype=float)
    fitted = np.array(columns, dtype=float).T @ np.array(out)
    residual = np.abs(fitted - y)   # not relative: that would shrink the outlier by its own size
    bound = OUTLIER * float(np.median(residual)) if len(y) else 0.0
    keep = [i for i, r in enumerate(residual) if r <= bound]
    if bound <= 0 or len(keep) == len(y) or len(keep) < 2 * MIN_REQUESTS:
        notes.extend(first)
        return out, rms
    notes.append(f"{' + '.join(names)}: {len(y) - len(keep)} of {len(y)} points left out as outliers "
                 f"(residual over {OUTLIER:g}x the median)")
    return _nonnegative_lstsq([[c[i] for i in keep] for c in columns], [target[i] for i in keep], names, notes)


def _nonnegative_lstsq(columns: list[list[float]], target: list[float], names: list[str],
                       notes: list[str]) -> tuple[list[float], float]:
    """Least squares with non-negative coefficients: a column without spread, or one whose coefficient comes
    out negative (the fixed one too, last), is dropped (noted) and the rest refitted. Returns coefficients
    and the relative RMS."""
    y = np.array(target, dtype=float)
    keep = [0] + [i for i in range(1, len(columns))
                  if np.std(columns[i]) > 0.02 * max(abs(float(np.mean(columns[i]))), 1e-12)]
    for i in range(1, len(columns)):
        if i not in keep:
            notes.append(f"{names[i]}: no spread in the data, folded into {names[0]}")
    coef = np.zeros(0)
    while keep:
        x = np.array([columns[i] for i in keep], dtype=float).T
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        negative = [keep[j] for j, c in enumerate(coef) if c < 0 and keep[j] != 0]
        if not negative and coef[0] < 0 and keep[0] == 0 and len(keep) > 1:
            # the fixed cost below zero: zero, and the others refitted without it (not merely clipped: a
            # 678 ms TTFT among 46-94 ms ones once gave 0 ms + 26 ms a prompt token)
            notes.append(f"{names[0]}: fitted negative, set to zero")
            keep.remove(0)
            continue
        if not negative:
            break
        worst = min(negative, key=lambda i: coef[keep.index(i)])
        notes.append(f"{names[worst]}: fitted negative, dropped")
        keep.remove(worst)
    out = [0.0] * len(columns)
    for j, i in enumerate(keep):
        out[i] = max(0.0, float(coef[j]))
    fitted = np.array(columns, dtype=float).T @ np.array(out)
    rms = float(np.sqrt(np.mean(((fitted - y) / np.maximum(np.abs(y), 1e-9)) ** 2))) if len(y) else 0.0
    return out, rms


def _solve_rate(mean_accepted: float, k: int) -> float:
    """The per-position rate q with q + q^2 + ... + q^k = ``mean_accepted`` (bisection)."""
    if k <= 0 or mean_accepted <= 0:
        return 0.0
    if mean_accepted >= k:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if sum(mid ** i for i in range(1, k + 1)) < mean_accepted:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _fit_arm(arm: str, runs: Sequence[Run]) -> ArmFit:
    notes: list[str] = []
    depth = sum(r.depth for r in runs) / len(runs)
    # the draft tokens a drafting step schedules, over all runs (a draft model: always its depth; prompt
    # lookup: as long as the match it found, so fewer on average than its most)
    drafting = sum(r.drafting_rounds or 0 for r in runs if r.draft_tokens)
    k = max(1, round(sum(r.draft_tokens or 0 for r in runs) / drafting)) if depth and drafting else 0
    # prefill first: TTFT at concurrency 1 (no queue); the lowest quarter of TTFTs when no such run
    alone = [r for run in runs if run.concurrency == 1 for r in run.requests]
    if not alone:
        every = sorted((r for run in runs for r in run.requests), key=lambda r: r.ttft_ms)
        alone = every[: max(MIN_REQUESTS, len(every) // 4)]
        notes.append("no concurrency-1 run: prefill fitted on the lowest quarter of TTFTs")
    prompt = [float(r.prompt_tokens or 0) for r in alone]
    (prefill_fixed, per_prefill), ttft_rms = _lstsq([[1.0] * len(alone), prompt], [r.ttft_ms for r in alone],
                                                    ["prefill_fixed_ms", "per_prefill_token_ms"], notes)
    if all(r.prompt_tokens is None for r in alone):
        notes.append("no prompt token counts (no usage): prefill is one fixed cost")
    # decode steps: a request's decode time over its rounds, less what others' prefill steps added to it
    ones, tokens, kv, step = [], [], [], []
    for run in runs:
        per_round = 1.0 + run.depth
        for request in run.requests:
            rounds = _rounds(run, request)
            span = request.decode_span[1] - request.decode_span[0]
            if rounds < 1 or span <= 0:
                continue
            batch, context, prefills = _overlap(run, request)
            extra = sum(per_prefill * (other.prompt_tokens or 0) for other in prefills)
            extra_fixed = len(prefills)     # steps whose fixed part was the prefill one
            ones.append(1.0)
            tokens.append(batch * per_round)
            kv.append(context)
            step.append((span * 1000.0 - extra) / rounds)
            ones[-1] -= extra_fixed / rounds   # those steps' fixed cost is prefill_fixed (below)
            step[-1] -= extra_fixed * prefill_fixed / rounds
    if len(step) < MIN_REQUESTS:
        raise FormatError(f"arm {arm}: too few requests with a decode to fit its step time "
                          f"({len(step)}; at least {MIN_REQUESTS})")
    (fixed, per_token, per_kv_ms), step_rms = _lstsq([ones, tokens, kv], step,
                                                     ["fixed_ms", "per_token_ms", "per_kv_token"], notes)
    most = max(_max_decoding(run) for run in runs)
    top = max(run.concurrency for run in runs)
    max_num_seqs = most if most < top else 256
    if most < top:
        notes.append(f"at most {most} request(s) decoded at once at concurrency {top}: max_num_seqs = {most}")
    families: dict[str, Acceptance] = {}
    draft_rate = _draft_rate(runs) if k else 1.0
    if k:
        by_family: dict[str, list[Run]] = {}
        for run in runs:
            by_family.setdefault(run.family, []).append(run)
        for family, group in sorted(by_family.items()):
            rounds = sum(r.drafting_rounds or 0 for r in group)
            accepted = sum(r.accepted or 0 for r in group)
            if not rounds:
                notes.append(f"family {family}: no speculative counters; its acceptance is the arm's mean")
                continue
            families[family] = _family_acceptance(group, k, _solve_rate(accepted / rounds, k), draft_rate)
        if not families:
            raise FormatError(f"arm {arm}: drafts counted but no accepted counters to fit acceptance")
    gaps = [g for run in runs for r in run.requests for g in r.token_gaps_ms() if g < 0.5 * fixed]
    burst = float(np.median(gaps)) if gaps else 0.0
    costs = StepCosts(fixed, per_token, prefill_fixed_ms=prefill_fixed, per_prefill_token_ms=per_prefill,
                      per_kv_token_us=per_kv_ms * 1000.0)
    if draft_rate < 1.0:
        notes.append(f"{draft_rate:.0%} of decode steps drafted (the counters' drafting steps over decode steps)")
    fit = ArmFit(arm, k, costs, max_num_seqs, families, burst, notes, step_rms, ttft_rms, draft_rate,
                 _step_jitter(runs, fixed))
    if (any(run.concurrency > 1 for run in runs) and any(r.prompt_tokens for r in alone)
            and per_prefill <= 2.0 * _slope_error(prompt, [r.ttft_ms for r in alone])):
        _prefill_from_batches(fit, runs, alone)
    return fit


def _slope_error(x: Sequence[float], y: Sequence[float]) -> float:
    """The standard error of the least-squares slope of ``y`` on ``x`` (infinite where ``x`` has no spread)."""
    n = len(x)
    mean_x, mean_y = sum(x) / n, sum(y) / n
    sxx = sum((v - mean_x) ** 2 for v in x)
    if n < 3 or sxx <= 0:
        return math.inf
    slope = sum((a - mean_x) * (b - mean_y) for a, b in zip(x, y, strict=True)) / sxx
    residual = sum((b - mean_y - slope * (a - mean_x)) ** 2 for a, b in zip(x, y, strict=True)) / (n - 2)
    return math.sqrt(residual / sxx)


JITTER_P95 = 1.645   # a normal spread's p95 in standard deviations


def _step_jitter(runs: Sequence[Run], fixed_ms: float) -> float:
    """The spread of a decode step's time: from the chunk gaps of the concurrency-1 runs whose chunks are
    engine steps (decode steps alone; gaps shorter than half a step are a stream's catching up), each over its
    request's median gap (what the model already spreads, a longer context, is left out), the relative
    standard deviation whose normal p95 is their p95 (a twin without it has every step the same length, and
    its ITL p95 is its median). A token stream gives none (0): a drafting step's gap and its tokens' small
    ones are not one step's spread (prompt lookup on llama.cpp read as 3.0)."""
    ratios = []
    for run in runs:
        if run.concurrency != 1 or not run.chunks_are_steps:
            continue
        for r in run.requests:
            gaps = [(b - a) * 1000.0 for a, b in zip(r.chunks, r.chunks[1:], strict=False)]
            gaps = [g for g in gaps if g >= 0.5 * fixed_ms]
            if len(gaps) >= 2 and (median := percentile(gaps, 50)) > 0:
                ratios += [g / median for g in gaps]
    if len(ratios) < 2 * MIN_REQUESTS:
        return 0.0
    return max(0.0, (percentile(ratios, 95) - 1.0) / JITTER_P95)


PREFILL_GRID = 40        # candidate per-prompt-token prefill costs tried on the twin
PREFILL_REQUESTS = 256   # requests of a run replayed per candidate (the first ones)


def _prefill_from_batches(fit: ArmFit, runs: Sequence[Run], alone: Sequence[Request]) -> None:
    """The per-prompt-token prefill cost where the concurrency-1 prompts do not pin it down (all about the same
    length: a fit below zero, or within twice its standard error of it): taken from the runs at higher
    concurrency, where several prompts are prefilled in one step. Each candidate cost (the fixed one then set
    so that a concurrency-1 prefill of the mean prompt keeps the fitted TTFT) replays those runs on
    the twin; the one whose median TTFTs are nearest those measured (least squares of the relative errors)
    is kept, zero included."""
    prompts = [r.prompt_tokens or 0 for r in alone]
    mean_prompt = sum(prompts) / len(prompts)
    # the fit's prefill of the mean prompt (its outliers left out), not the TTFTs' own mean
    mean_ttft = (fit.costs.prefill_fixed_ms or 0.0) + fit.costs.per_prefill_token_ms * mean_prompt
    batched = [run for run in runs if run.concurrency > 1]
    observed = [percentile([r.ttft_ms for r in run.requests], 50) for run in batched]
    budgets = Budgets(max_num_seqs=fit.max_num_seqs)
    acceptance = {**fit.families, "": fit.acceptance()}

    def priced(per_token: float) -> StepCosts:
        fixed = mean_ttft - per_token * mean_prompt
        return StepCosts(fit.costs.fixed_ms, fit.costs.per_token_ms, prefill_fixed_ms=fixed,
                         per_prefill_token_ms=per_token, per_kv_token_us=fit.costs.per_kv_token_us)

    def error(per_token: float) -> float:
        costs, total = priced(per_token), 0.0
        for run, measured in zip(batched, observed, strict=True):
            jobs = [Job(max(1, r.prompt_tokens or 0), run.max_tokens, family=run.family if run.family in acceptance
                        else "") for r in run.requests[:PREFILL_REQUESTS]]
            result = simulate(jobs, k=fit.k, costs=costs, budgets=budgets, acceptance=acceptance,
                              concurrency=run.concurrency, draft_rate=fit.draft_rate)
            total += ((percentile([o.ttft_ms for o in result.outcomes], 50) - measured) / measured) ** 2
        return total

    candidates = [mean_ttft / mean_prompt * i / PREFILL_GRID for i in range(PREFILL_GRID)] if mean_prompt else [0.0]
    errors = [error(c) for c in candidates]
    per_token = candidates[min(range(len(candidates)), key=errors.__getitem__)]
    fit.costs = priced(per_token)
    fit.notes.append(f"per_prefill_token_ms {per_token:.3g}: from the median TTFTs at concurrency > 1 replayed on the "
                     "twin (several prompts prefilled in one step; the concurrency-1 prompts could not give it)")


DRAFTS_EVERY_STEP = 0.95   # drafting steps over the steps that could draft, at or above which every step drafts


def _draft_rate(runs: Sequence[Run]) -> float:
    """The share of decode steps that draft, where the counters tell drafting steps apart (1 where not).

    A request's last step with one token left drafts nothing on any server, so the steps that could
    draft are the decode steps less one per request; a draft model drafting at every other step
    reads about 1 (taken as 1), prompt lookup well below it."""
    counted = [r for r in runs if r.drafts is not None and r.rounds]
    could = sum((r.rounds or 0) - len(r.requests) for r in counted)
    if could <= 0:
        return 1.0
    rate = sum(r.drafts or 0 for r in counted) / could
    return 1.0 if rate >= DRAFTS_EVERY_STEP else rate


def _family_acceptance(runs: Sequence[Run], k: int, pooled: float, draft_rate: float = 1.0) -> Acceptance:
    """A family's rate and Beta concentration: from the per-request rates where chunks are engine steps (the
    pooled counters weigh low-acceptance requests more: they take more rounds), else the pooled rate alone.
    Where not every step drafts, a request's tokens per step mix its luck in drafting with its acceptance:
    the pooled rate of the drafting steps alone (the counters) is the family's, without a spread."""
    if draft_rate < 1.0:
        return Acceptance(pooled)
    rates = []
    for run in runs:
        if not run.chunks_are_steps:
            return Acceptance(pooled)
        for r in run.requests:
            rounds = len(r.chunks) - 1
            if rounds >= 4:
                rates.append(_solve_rate((r.tokens - r.chunk_tokens[0]) / rounds - 1.0, k))
    if len(rates) < MIN_REQUESTS:
        return Acceptance(pooled)
    rate = float(np.mean(rates))
    var = float(np.var(rates))
    if var <= 0 or not 0 < rate < 1:
        return Acceptance(rate)
    return Acceptance(rate, float(min(1000.0, max(1.0, rate * (1 - rate) / var - 1.0))))


def calibrate(runs: Sequence[Run], *, seed: int = 0) -> Calibration:
    """Fit every arm's step model and acceptance from its runs; refuse too little data (one line)."""
    by_arm: dict[str, list[Run]] = {}
    for run in runs:
        if len(run.requests) < MIN_REQUESTS:
            raise FormatError(f"{run.arm}={run.path}: {len(run.requests)} successful request(s); "
                              f"a run needs at least {MIN_REQUESTS}")
        by_arm.setdefault(run.arm, []).append(run)
    if not by_arm:
        raise FormatError("no runs given (--run ARM=DIR, from tally measure --out DIR)")
    for arm, group in by_arm.items():
        levels = sorted({r.concurrency for r in group})
        if len(levels) < 2:
            raise FormatError(f"arm {arm}: runs at {len(levels)} concurrency level(s) ({levels}); "
                              "calibration needs at least 2")
    fits = {arm: _fit_arm(arm, group) for arm, group in by_arm.items()}
    table = _config_table(fits, runs)
    config = config_from_dict(table, where="calibration")
    residuals = [compare(observed_figures(run), predict(config, run, seed=seed)) | {
        "arm": run.arm, "family": run.family, "concurrency": run.concurrency, "path": run.path} for run in runs]
    return Calibration(config, fits, residuals, table)


def _config_table(fits: Mapping[str, ArmFit], runs: Sequence[Run]) -> dict[str, Any]:
    """The twin's settings: the batch step model, how the server streams and counts, and each arm; the first
    arm measured is also the twin's ``production`` (the server the operator serves from)."""
    streams_steps = all(r.chunks_are_steps for r in runs)
    source = runs[0].counter_source
    arms = {}
    for name, fit in fits.items():
        acceptance = fit.acceptance()
        arms[name] = {
            "k": fit.k, "acceptance": [acceptance.rate] * fit.k,
            "step_base_ms": fit.costs.fixed_ms, "step_per_token_ms": fit.costs.per_token_ms,
            "ttft_base_ms": fit.costs.prefill_fixed_ms or fit.costs.fixed_ms,
            "ttft_per_1k_tokens_ms": fit.costs.per_prefill_token_ms * 1000.0,
            "step_per_kv_token_us": fit.costs.per_kv_token_us, "max_num_seqs": fit.max_num_seqs,
            **({"draft_rate": fit.draft_rate} if fit.k and fit.draft_rate < 1.0 else {}),
            **({"acceptance_rate": acceptance.rate, "acceptance_concentration": acceptance.concentration,
                "families": {f: {"rate": a.rate, "concentration": a.concentration}
                             for f, a in fit.families.items()}} if fit.k else {}),
        }
    arms["production"] = dict(arms[next(iter(fits))])
    data: dict[str, Any] = {
        "step_model": "batch", "start_jitter": 0.0, "cold_ttft_extra_ms": 0.0, "arms": arms,
        "step_jitter": round(sum(f.step_jitter for f in fits.values()) / len(fits), 4),
        "stream_mode": "step" if streams_steps else "token",
        "metrics_format": "llamacpp" if source == "llamacpp" else "vllm",
    }
    if not streams_steps:
        data["token_burst_ms"] = max(f.token_burst_ms for f in fits.values())
    return data


# ---------------------------------------------------------------------- prediction


def arm_model(arm: ArmConfig) -> tuple[StepCosts, Budgets, Acceptance | dict[str, Acceptance]]:
    """An arm's step model (costs, budgets, acceptance per family) as the batch simulator takes it."""
    costs = StepCosts(arm.step_base_ms, arm.step_per_token_ms, prefill_fixed_ms=arm.ttft_base_ms,
                      per_prefill_token_ms=arm.ttft_per_1k_tokens_ms / 1000.0,
                      per_kv_token_us=arm.step_per_kv_token_us)
    budgets = Budgets(arm.max_num_batched_tokens, arm.max_num_seqs, arm.kv_cache_blocks)
    rate = arm.acceptance_rate if arm.acceptance_rate is not None else (arm.acceptance[0] if arm.acceptance else 0.0)
    default = Acceptance(rate, arm.acceptance_concentration)
    families = {name: Acceptance(float(f["rate"]), float(f.get("concentration", 0.0)))
                for name, f in (arm.families or {}).items()}
    return costs, budgets, ({**families, "": default} if families else default)


def predict(config: SimConfig, run: Run, *, seed: int = 0, concurrency: int | None = None) -> dict[str, Any]:
    """The twin's figures for ``run``'s workload (its requests' prompts and lengths) on its arm."""
    arm = config.arm(run.arm)
    costs, budgets, acceptance = arm_model(arm)
    family = run.family if isinstance(acceptance, dict) and run.family in acceptance else ""
    # a request whose prompt tokens the server did not say (no usage) still has its prefill: one token stands
    # for it (the fit then folded the per-token part into the fixed cost); 0 would make it a decode step
    jobs = [Job(max(1, r.prompt_tokens or 0), run.max_tokens, family=family) for r in run.requests]
    result = simulate(jobs, k=arm.k, costs=costs, budgets=budgets, acceptance=acceptance,
                      concurrency=concurrency or run.concurrency, seed=seed, draft_rate=arm.draft_rate,
                      jitter=config.step_jitter)
    burst = config.token_burst_ms if config.stream_mode == "token" else 0.0
    return _sim_figures(result, burst, per_step=run.chunks_are_steps)


def _sim_figures(result: SimResult, burst_ms: float, per_step: bool) -> dict[str, Any]:
    tpot = [o.tpot_ms for o in result.outcomes if o.tpot_ms is not None]
    ttft = [o.ttft_ms for o in result.outcomes]
    itl: list[float] = []
    for o in result.outcomes:
        for gap, n in zip(o.itl_ms, o.chunk_tokens[1:], strict=True):
            itl.append(gap)
            if not per_step:
                itl.extend([burst_ms] * (n - 1))
    # per decode step, drafting or not, as a run's counters give it (accepted over decode steps)
    rounds = sum(len(o.drafts) for o in result.outcomes) if any(d for o in result.outcomes for d in o.drafts) else 0
    accepted = sum(a for o in result.outcomes for a, d in zip(o.accepted, o.drafts, strict=True) if d)
    apr = [(o.generated - o.chunk_tokens[0]) / (len(o.chunk_ms) - 1) - 1.0 for o in result.outcomes
           if len(o.chunk_ms) > 1 and any(o.drafts)]
    return _figures(tpot, itl, ttft, apr if per_step else [], accepted / rounds if rounds else None)


def observed_figures(run: Run) -> dict[str, Any]:
    """The same figures from a measured run."""
    tpot = [r.tpot_ms for r in run.requests if r.tpot_ms is not None]
    itl = [g for r in run.requests for g in (r.token_gaps_ms() if not run.chunks_are_steps else
                                             [(b - a) * 1000.0 for a, b in zip(r.chunks, r.chunks[1:],
                                                                               strict=False)])]
    apr: list[float] = []
    if run.chunks_are_steps and run.depth:
        for r in run.requests:
            if len(r.chunks) > 1:
                apr.append((r.tokens - r.chunk_tokens[0]) / (len(r.chunks) - 1) - 1.0)
    return _figures(tpot, itl, [r.ttft_ms for r in run.requests], apr, run.accepted_per_round)


def _figures(tpot: list[float], itl: list[float], ttft: list[float], apr: list[float],
             wave_apr: float | None) -> dict[str, Any]:
    def two(values: list[float]) -> dict[str, float] | None:
        return {"p50": percentile(values, 50), "p95": percentile(values, 95)} if values else None

    accepted = two(apr)
    if accepted is None and wave_apr is not None:
        accepted = {"p50": wave_apr, "p95": wave_apr}   # only the wave's counters: its mean
    return {"tpot_ms": two(tpot), "itl_ms": two(itl), "ttft_ms": two(ttft), "accepted_per_round": accepted}


def compare(observed: Mapping[str, Any], predicted: Mapping[str, Any]) -> dict[str, Any]:
    """Relative error (predicted - observed) / observed of each figure's p50 and p95 (None where absent)."""
    errors: dict[str, Any] = {}
    for name in FIGURES:
        obs, pred = observed.get(name), predicted.get(name)
        if not obs or not pred:
            errors[name] = None
            continue
        errors[name] = {q: (None if obs[q] == 0 else (pred[q] - obs[q]) / abs(obs[q])) for q in ("p50", "p95")}
    return {"observed": dict(observed), "predicted": dict(predicted), "error": errors}


# ---------------------------------------------------------------------- the written config


def config_toml(table: Mapping[str, Any], header: Sequence[str] = ()) -> str:
    """A config table (:attr:`Calibration.table`) as TOML (what :func:`.config.load_config` reads back)."""
    data: dict[str, Any] = json.loads(json.dumps(dict(table)))
    lines = [f"# {line}" for line in header]
    arms = data.pop("arms")
    if data.pop("faults", None):
        raise ValueError("a calibrated config carries no faults")
    for key, value in data.items():
        lines.append(f"{key} = {_toml(value)}")
    for name, arm in arms.items():
        families = arm.pop("families", None)
        lines += ["", f"[arms.{_key(name)}]"]
        lines += [f"{key} = {_toml(value)}" for key, value in arm.items()]
        for family, values in (families or {}).items():
            lines += ["", f"[arms.{_key(name)}.families.{_key(family)}]"]
            lines += [f"{key} = {_toml(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def _key(name: str) -> str:
    return name if name and all(c.isalnum() or c in "-_" for c in name) else json.dumps(name)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"cannot write {value!r} as TOML")
