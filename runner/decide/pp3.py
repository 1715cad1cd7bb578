"""Rule ``pp3-v1`` (seed 003, "Pre-registered rule"; ``docs/rules.md``).

Blocks A1 B1 B2 A2 each run the same frozen requests; a pair is one (family, context).
Throughput gain of B over A pooled over all pairs, a source-cluster bootstrap (clusters are
the families) for its lower bound, and per-pair TTFT / p95 round-time guards.
``docs/rules.md`` is the reference.

Pure: no I/O, no clock. ``parse`` validates (``FieldError`` naming the field),
``decide`` computes the result dict whose key names are a contract.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ledger.errors import FieldError

from ..fields import Fields
from ..vocabulary import DECISION_REQUEST_STATUSES, DecisionRequestStatus, Pp3Decision
from .clocks import cap_reasons, dial_back_reasons

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "BLOCKS",
    "OBSERVED",
    "RULE",
    "Clocks",
    "FamilySums",
    "Pp3Input",
    "Pp3Params",
    "Request",
    "bootstrap_gains",
    "decide",
    "family_sums",
    "pair_label",
    "pairs_of",
    "parse",
]

RULE = "pp3-v1"
BLOCKS = ("A1", "B1", "B2", "A2")
ARM_BLOCKS = {"A": ("A1", "A2"), "B": ("B1", "B2")}
STATUSES = DECISION_REQUEST_STATUSES
OBSERVED = ("ok", "bounded")  # a bounded run (cut by the registered decode bound) is an observation
CONTEXT_ORDER = {"short": 0, "32k": 1, "150k": 2}
MAX_BOOTSTRAP = 1_000_000
MAX_SEED = 2**53 - 1

Status = DecisionRequestStatus
Decision = Pp3Decision
Pair = tuple[str, str]
GuardFigure = Literal["round_ms_p95", "tpot_ms"]
GUARD_FIGURES: tuple[GuardFigure, ...] = ("round_ms_p95", "tpot_ms")
# The per-pair change each guard figure is compared by, and how reasons name it.
GUARD_CHANGE: dict[str, tuple[str, str]] = {"round_ms_p95": ("round_p95_change", "p95 round time"),
                                            "tpot_ms": ("tpot_change", "TPOT")}
GUARD_NOUN = {"round_ms_p95": "p95 round-time", "tpot_ms": "TPOT"}  # the CANDIDATE reason's words (a contract)


@dataclass(frozen=True)
class Pp3Params:
    min_gain: float = 0.05
    bootstrap: int = 2000
    seed: int = 4103
    interval: float = 0.90
    max_regression: float = 0.05
    guard: GuardFigure = "round_ms_p95"  # the per-request timing the guard compares besides TTFT

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"min_gain": self.min_gain, "bootstrap": self.bootstrap, "seed": self.seed,
                                "interval": self.interval, "max_regression": self.max_regression}
        if self.guard != "round_ms_p95":
            data["guard"] = self.guard
        return data


@dataclass(frozen=True)
class Request:
    index: int
    block: str
    arm: str
    family: str
    context: str
    status: str
    delivered_tokens: int | None
    decode_s: float | None
    ttft_s: float | None
    round_ms_p95: float | None
    prompt_id: str | None = None
    tpot_ms: float | None = None

    @property
    def pair(self) -> Pair:
        return (self.family, self.context)


@dataclass(frozen=True)
class Clocks:
    """The blocks' recorded clock caps and the dial-backs inside the HOLD (input member ``clocks``)."""

    production_clock_cap_mhz: int | None   # None: GPU clocks do not apply on the site
    blocks: Mapping[str, int | None]
    thermal_dialbacks_in_hold: int


@dataclass(frozen=True)
class Pp3Input:
    params: Pp3Params
    gates_passed: bool
    failures: tuple[str, ...]
    requests: tuple[Request, ...]
    clocks: Clocks | None = None           # absent in inputs built before the rule read clocks
    incomplete: tuple[str, ...] = ()       # recorded conditions not met as registered (priming)
    smoke_missing: tuple[str, ...] = ()   # registered smoke probes that did not run (incomplete)
    # per arm: accepted draft tokens per engine round over its blocks' waves (input builder 5); never decides
    accepted_per_round: Mapping[str, float | None] | None = None


# --------------------------------------------------------------------------- parsing

def parse(data: Any) -> Pp3Input:
    """Validate a ``pp3-v1`` input; raise ``FieldError`` naming the first bad field."""
    f = Fields(data, "", dialect="json")
    f.string("rule", choices=(RULE,))
    params = _params(f.table("params"))
    gates_passed = f.boolean("gates_passed")
    failures = f.strings("failures", nonempty=True, unique=False)
    requests = tuple(_request(r, i) for i, r in enumerate(f.tables("requests")))
    clocks = _clocks(f.table("clocks")) if "clocks" in f.data else None
    incomplete = f.strings("incomplete", (), nonempty=True, unique=False)
    smoke_missing = f.strings("smoke_missing", (), nonempty=True, unique=False)
    accepted_per_round = _diagnostics(f.table("diagnostics")) if "diagnostics" in f.data else None
    f.done()
    seen: dict[tuple[str, str, str, str | None], int] = {}
    for r in requests:
        key = (r.block, r.family, r.context, r.prompt_id)
        if key in seen:
            raise FieldError(f"requests[{r.index}]", f"duplicate of requests[{seen[key]}] "
                                                     f"(block {r.block}, {pair_label(r.pair)})")
        seen[key] = r.index
    return Pp3Input(params, gates_passed, tuple(failures), requests, clocks, tuple(incomplete), tuple(smoke_missing),
                    accepted_per_round)


def _diagnostics(f: Fields) -> dict[str, float | None]:
    table = f.table("accepted_per_round", required=True)
    out = {role: table.number(role, low=0, nullable=True) for role in ("A", "B") if role in table.data}
    table.done()
    f.done()
    return out


def _clocks(f: Fields) -> Clocks:
    production = f.integer("production_clock_cap_mhz", low=1, nullable=True)
    blocks_t = f.table("blocks", required=True)
    blocks = {b: blocks_t.integer(b, low=1, nullable=True) for b in BLOCKS}
    blocks_t.done()
    thermal = f.integer("thermal_dialbacks_in_hold", low=0)
    f.done()
    return Clocks(production, blocks, thermal)


def _params(f: Fields) -> Pp3Params:
    d = Pp3Params()
    min_gain = f.number("min_gain", d.min_gain, low=0)
    boot = f.integer("bootstrap", d.bootstrap, low=1, high=MAX_BOOTSTRAP)
    seed = f.integer("seed", d.seed, low=0, high=MAX_SEED)
    interval = f.number("interval", d.interval, low=0, high=1, low_open=True, high_open=True)
    regression = f.number("max_regression", d.max_regression, low=0)
    guard = f.string("guard", d.guard, choices=GUARD_FIGURES)
    f.done()
    return Pp3Params(float(min_gain), boot, seed, float(interval), float(regression), guard)


def _request(f: Fields, index: int) -> Request:
    block = f.string("block", choices=BLOCKS)
    arm = f.string("arm", choices=("A", "B"))
    if arm != block[0]:
        raise f.fail("arm", f"block {block} belongs to arm {block[0]}, got {arm!r}")
    family = f.string("family", nonempty=True)
    context = f.string("context", nonempty=True)
    if "/" in family:
        raise f.fail("family", "must not contain '/' (pairs are named family/context)")
    status = f.string("status", choices=STATUSES)
    tokens = f.integer("delivered_tokens", low=0, nullable=True)
    decode_s = f.number("decode_s", low=0, nullable=True)
    ttft = f.number("ttft_s", low=0, nullable=True)
    p95 = f.number("round_ms_p95", low=0, nullable=True)
    prompt_id = f.string("prompt_id", None, nonempty=True)
    tpot = None if f.raw("tpot_ms") is None else f.number("tpot_ms", low=0)  # optional, may be null
    f.string("reason", None, nonempty=True)
    f.done()
    return Request(index, block, arm, family, context, status, tokens, decode_s, ttft, p95, prompt_id, tpot)


# --------------------------------------------------------------------------- helpers for rule and report

def pair_label(pair: Pair) -> str:
    return f"{pair[0]}/{pair[1]}"


def pairs_of(requests: Sequence[Request]) -> list[Pair]:
    """Every pair seen, families by name, contexts short, 32k, 150k, then others by name."""
    return sorted({r.pair for r in requests}, key=lambda p: (p[0], CONTEXT_ORDER.get(p[1], len(CONTEXT_ORDER)), p[1]))


Table = Mapping[tuple[str, Pair], tuple[Request, ...]]


def _table(requests: Sequence[Request]) -> dict[tuple[str, Pair], tuple[Request, ...]]:
    """(block, pair) -> the block's requests of the pair, in input order (a cluster holds them all)."""
    out: dict[tuple[str, Pair], list[Request]] = {}
    for r in requests:
        out.setdefault((r.block, r.pair), []).append(r)
    return {key: tuple(value) for key, value in out.items()}


def _usable(table: Table, pair: Pair) -> bool:
    """Every block has the pair, as many requests as every other block, each observed with tokens and seconds."""
    counts = set()
    for block in BLOCKS:
        requests = table.get((block, pair), ())
        if not requests or any(r.status not in OBSERVED or r.delivered_tokens is None or r.decode_s is None
                               for r in requests):
            return False
        counts.add(len(requests))
    return len(counts) == 1


def _label(table: Table, r: Request) -> str:
    """``block A1 f1/short`` (with the prompt when the block holds several requests of the pair)."""
    several = len(table.get((r.block, r.pair), ())) > 1
    return f"block {r.block} {pair_label(r.pair)}" + (f" ({r.prompt_id})" if several and r.prompt_id else "")


@dataclass(frozen=True)
class FamilySums:
    """Per family (sorted by name): arm A and B delivered tokens and decode seconds over its usable pairs."""

    families: tuple[str, ...]
    tokens_a: tuple[int, ...]
    decode_a: tuple[float, ...]
    tokens_b: tuple[int, ...]
    decode_b: tuple[float, ...]
    pairs: tuple[int, ...]


def family_sums(requests: Sequence[Request]) -> FamilySums:
    table = _table(requests)
    usable = [p for p in pairs_of(requests) if _usable(table, p)]
    families = tuple(sorted({p[0] for p in usable}))
    tok: dict[str, list[int]] = {}
    dec: dict[str, list[float]] = {}
    for arm, blocks in ARM_BLOCKS.items():
        tok[arm], dec[arm] = [], []
        for f in families:
            chosen = [r for p in usable if p[0] == f for b in blocks for r in table[(b, p)]]
            tok[arm].append(sum(r.delivered_tokens or 0 for r in chosen))
            dec[arm].append(math.fsum(r.decode_s or 0.0 for r in chosen))
    pairs = tuple(sum(1 for p in usable if p[0] == f) for f in families)
    return FamilySums(families, tuple(tok["A"]), tuple(dec["A"]), tuple(tok["B"]), tuple(dec["B"]), pairs)


def _gain(tokens_b: float, decode_b: float, tokens_a: float, decode_a: float) -> float:
    return (tokens_b / decode_b) / (tokens_a / decode_a) - 1


def _not_computable(sums: FamilySums) -> str | None:
    if not sums.families:
        return "no pair has all four blocks ok"
    for i, f in enumerate(sums.families):
        for what, value in (("arm A delivered tokens", sums.tokens_a[i]), ("arm A decode seconds", sums.decode_a[i]),
                            ("arm B decode seconds", sums.decode_b[i])):
            if value <= 0:
                return f"family {f}: {what} sum to zero"
    return None


def bootstrap_gains(sums: FamilySums, params: Pp3Params) -> npt.NDArray[np.float64]:
    """The ``params.bootstrap`` resampled gains (vectorised over resamples).

    ``idx = default_rng(seed).integers(0, k, size=(bootstrap, k))``; resample b's sums add the
    chosen families' sums left to right over ``idx[b, 0..k-1]``.
    """
    import numpy as np

    k = len(sums.families)
    rng = np.random.default_rng(params.seed)
    idx = rng.integers(0, k, size=(params.bootstrap, k))
    columns = [np.asarray(v, dtype=np.float64) for v in (sums.tokens_b, sums.decode_b, sums.tokens_a, sums.decode_a)]
    totals = []
    for column in columns:
        acc = column[idx[:, 0]]
        for m in range(1, k):
            acc = acc + column[idx[:, m]]
        totals.append(acc)
    tb, db, ta, da = totals
    with np.errstate(all="ignore"):  # an overflow shows as a non-finite result, refused by compute()
        gains: npt.NDArray[np.float64] = (tb / db) / (ta / da) - 1
    return gains


# --------------------------------------------------------------------------- deciding

def decide(inp: Pp3Input) -> dict[str, Any]:
    """The ``pp3-v1`` result (its key names are a contract: ``docs/rules.md``)."""
    import numpy as np

    p = inp.params
    pairs = pairs_of(inp.requests)
    ordered = sorted(inp.requests, key=lambda r: (BLOCKS.index(r.block), pairs.index(r.pair)))
    table = _table(inp.requests)
    reject: list[str] = [f"failure: {f}" for f in inp.failures]
    reject += [f"lost request: {_label(table, r)}" for r in ordered if r.status == "lost"]
    hold: list[str] = []
    if not inp.gates_passed:
        hold.append("not every gate passed")
    if inp.clocks is not None:
        hold += cap_reasons(inp.clocks.blocks, inp.clocks.production_clock_cap_mhz, "blocks")
        hold += dial_back_reasons(inp.clocks.thermal_dialbacks_in_hold)
    hold += [f"incomplete: {what}" for what in inp.incomplete]
    hold += [f"incomplete: {m}" for m in inp.smoke_missing]
    hold += [f"request not ok: {_label(table, r)} is {r.status}" for r in ordered
             if r.status not in (*OBSERVED, "lost")]
    if not pairs:
        hold.append("incomplete: no requests")
    for pair in pairs:
        absent = [b for b in BLOCKS if (b, pair) not in table]
        if absent:
            hold.append(f"incomplete: pair {pair_label(pair)} missing in block {', '.join(absent)}")
        elif not _usable(table, pair):
            nulls = [f"{b} {what}" for b in BLOCKS for what in ("delivered_tokens", "decode_s")
                     if any(r.status in OBSERVED and getattr(r, what) is None for r in table[(b, pair)])]
            if nulls:
                hold.append(f"incomplete: pair {pair_label(pair)} lacks {', '.join(nulls)}")
            counts = {b: len(table[(b, pair)]) for b in BLOCKS}
            if len(set(counts.values())) > 1:
                hold.append(f"incomplete: pair {pair_label(pair)} has "
                            + ", ".join(f"{n} request(s) in {b}" for b, n in counts.items()))

    sums = family_sums(inp.requests)
    problem = _not_computable(sums)
    point: float | None = None
    lower: float | None = None
    distinct: int | None = None
    per_family: dict[str, Any] = {}
    if problem is None:
        point = _gain(_left_sum(sums.tokens_b), _left_sum(sums.decode_b),
                      _left_sum(sums.tokens_a), _left_sum(sums.decode_a))
        gains = bootstrap_gains(sums, p)
        lower = float(np.quantile(gains, (1 - p.interval) / 2))
        distinct = int(np.unique(np.round(gains, 12)).size)
        for i, f in enumerate(sums.families):
            per_family[f] = {"gain": _gain(sums.tokens_b[i], sums.decode_b[i], sums.tokens_a[i], sums.decode_a[i]),
                             "pairs": sums.pairs[i]}
    else:
        hold.append(f"gain not computable: {problem}")

    per_pair: dict[str, Any] = {}
    for pair in pairs:
        entry = _pair_changes(table, pair, p.guard)
        per_pair[pair_label(pair)] = entry
        if not _usable(table, pair):
            continue
        for key, what in (("ttft_change", "TTFT"), GUARD_CHANGE[p.guard]):
            change = entry[key]
            if change is None:
                hold.append(f"guard not evaluable: {pair_label(pair)} {what} missing")
            elif change > p.max_regression:
                hold.append(f"regression: {pair_label(pair)} {what} {change:+.2%} > {p.max_regression:+.2%}")

    if point is not None and lower is not None:
        if point < p.min_gain:
            hold.append(f"point gain {point:+.2%} < {p.min_gain:+.2%}")
        if lower <= 0:
            hold.append(f"{p.interval:.0%} bootstrap lower bound {lower:+.2%} <= 0")

    decision: Decision = "REJECT" if reject else "NO_PROMOTION" if hold else "CANDIDATE"
    reasons = [*reject, *hold]
    if decision == "CANDIDATE" and point is not None and lower is not None:
        reasons += [f"point gain {point:+.2%} >= {p.min_gain:+.2%}",
                    f"{p.interval:.0%} bootstrap lower bound {lower:+.2%} > 0",
                    f"no TTFT or {GUARD_NOUN[p.guard]} regression above {p.max_regression:+.2%} in any pair",
                    "every gate passed; CANDIDATE is not promotion"]
    if distinct is not None:
        reasons.append(f"small-family limit: {len(sums.families)} source famil"
                       f"{'y' if len(sums.families) == 1 else 'ies'} as clusters, "
                       f"{distinct} distinct values among {p.bootstrap} resamples")
    reasons.append(f"decision {decision}")
    return {
        "rule": RULE,
        "decision": decision,
        "reasons": reasons,
        "point_gain": point,
        "lower_bound": lower,
        "distinct_resamples": distinct,
        "resamples": p.bootstrap,
        "per_pair": per_pair,
        "per_family": per_family,
        "params": p.to_json(),
    } | ({"diagnostics": {"accepted_per_round": dict(inp.accepted_per_round)}}
         if inp.accepted_per_round is not None else {})


def _left_sum(values: Sequence[float]) -> float:
    """Left-to-right float sum (as the bootstrap adds the chosen families)."""
    total = float(values[0])
    for v in values[1:]:
        total = total + float(v)
    return total


def _mean_change(table: Table, pair: Pair, field: str) -> float | None:
    """B's mean over A's mean - 1: each block's value the mean of its requests', each arm's the mean of its blocks'."""
    values: dict[str, list[float]] = {}
    for arm, blocks in ARM_BLOCKS.items():
        values[arm] = []
        for b in blocks:
            requests = table.get((b, pair), ())
            seen = [getattr(r, field) for r in requests]
            if not seen or any(v is None for v in seen):
                return None
            values[arm].append(math.fsum(seen) / len(seen))
    mean_a = math.fsum(values["A"]) / 2
    mean_b = math.fsum(values["B"]) / 2
    return None if mean_a == 0 else mean_b / mean_a - 1


def _pair_changes(table: Table, pair: Pair, guard: GuardFigure = "round_ms_p95") -> dict[str, float | None]:
    gain: float | None = None
    if _usable(table, pair):
        tok = {arm: sum(r.delivered_tokens or 0 for b in blocks for r in table[(b, pair)])
               for arm, blocks in ARM_BLOCKS.items()}
        dec = {arm: math.fsum(r.decode_s or 0.0 for b in blocks for r in table[(b, pair)])
               for arm, blocks in ARM_BLOCKS.items()}
        if tok["A"] > 0 and dec["A"] > 0 and dec["B"] > 0:
            gain = _gain(tok["B"], dec["B"], tok["A"], dec["A"])
    changes = {"gain": gain, "ttft_change": _mean_change(table, pair, "ttft_s"),
               "round_p95_change": _mean_change(table, pair, "round_ms_p95")}
    if guard == "tpot_ms":
        changes["tpot_change"] = _mean_change(table, pair, "tpot_ms")
    return changes
