"""The promotion gate (``docs/promotion.md``): is this decision receipt enough to promote the candidate?

``check_promotion(files, policy)`` works offline, from the receipt's files alone:

1. the receipt verifies (DSSE signature under a log key the policy pins, the Statement's
   subject, the tlog-proof's inclusion in a checkpoint signed by that key, the event
   file hashing to the subject), and the checkpoint carries cosignatures of at least
   ``witness_threshold`` of the policy's witnesses (k of n);
2. the receipt is of a ``decision.recorded`` event, and its window context (the window's
   events up to the decision, each proven included in the same checkpoint) checks out;
3. the policy: rule, mode (from the registered plan whose digest the decision names),
   decision WIN, the result recomputed from the recorded input, the metric set of every
   decision cell, the recorded fields, the gates that admitted the window and the
   carried-qualification binding (the admission receipt's commit is the carried commit,
   carried to the plan's commit; the RNG gate read the same admission receipt), the
   clock conditions and the archive conditions;
4. the looks (``looks``): with the ledger presented (a full export bundle covering the
   receipt's checkpoint), every window decided for the candidate is counted and the
   decision must pass the level the policy's registered budget gives its look.

Every check is reported with its detail; PROMOTABLE only when every one holds. It
promotes nothing: it is what a promotion pipeline calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ledger.errors import FormatError, TallyError, VerificationError
from ledger.event import Event, event_from_json
from ledger.receipt import VerifiedReceipt, verify_inclusion_record, verify_receipt
from ledger.strictjson import read_json

from ..events.receipts import WINDOW_RECEIPTS
from ..plan.model import Plan, plan_sha256
from .policy import PromotionPolicy

if TYPE_CHECKING:
    from ledger.bundle import VerifiedBundle

__all__ = ["Check", "PromotionResult", "ReceiptFiles", "check_promotion"]

PromotionVerdict = Literal["PROMOTABLE", "NOT_PROMOTABLE"]


@dataclass(frozen=True)
class ReceiptFiles:
    """The texts of one exported receipt (``tally receipt export --window-context``)."""

    seq: int
    envelope: str
    proof: str
    event: str
    context: str | None = None
    context_proofs: str | None = None


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class PromotionResult:
    policy: PromotionPolicy
    checks: tuple[Check, ...]
    seq: int
    window: str | None = None
    receipt: dict[str, Any] = field(default_factory=dict)
    looks: dict[str, Any] | None = None

    @property
    def verdict(self) -> PromotionVerdict:
        return "PROMOTABLE" if self.checks and all(c.ok for c in self.checks) else "NOT_PROMOTABLE"

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(f"{c.name}: {c.detail}" for c in self.checks if not c.ok)

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "policy": self.policy.name, "policy_sha256": self.policy.sha256,
                "seq": self.seq, "window": self.window, "receipt": self.receipt,
                "checks": [c.to_json() for c in self.checks], "reasons": list(self.reasons), "looks": self.looks}


class _Checks:
    def __init__(self) -> None:
        self.items: list[Check] = []

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.items.append(Check(name, ok, detail))
        return ok


# ---------------------------------------------------------------------- the receipt and its context


def _verify(files: ReceiptFiles, policy: PromotionPolicy, checks: _Checks) -> VerifiedReceipt | None:
    try:
        verified = verify_receipt(files.envelope, files.proof, policy.log_keys, policy=WINDOW_RECEIPTS,
                                  witnesses=policy.witnesses, threshold=0, event_text=files.event)
    except VerificationError as exc:
        checks.add("receipt", False, f"the receipt does not verify: {exc.args[0]}")
        return None
    if verified.seq != files.seq:
        checks.add("receipt", False, f"the receipt's subject is seq {verified.seq}, not {files.seq}")
        return None
    checks.add("receipt", True, f"{verified.origin}#{verified.seq}: DSSE signature by {verified.signed_by[0][:16]}, "
                                f"included at index {verified.seq - 1} of checkpoint size {verified.checkpoint.size}")
    cosigners = {w.verifier.public_raw for w in verified.checkpoint.witnesses}
    names = sorted({w.verifier.name for w in verified.checkpoint.witnesses})
    need = policy.witness_threshold
    checks.add("witness_quorum", len(cosigners) >= need,
               f"{len(cosigners)} of the policy's {len(policy.witnesses)} witnesses cosigned the checkpoint"
               f"{' (' + ', '.join(names) + ')' if names else ''}; the policy needs {need}")
    return verified


def _context(files: ReceiptFiles, verified: VerifiedReceipt, decision: Event, checks: _Checks) -> list[Event] | None:
    if files.context is None or files.context_proofs is None:
        checks.add("context", False, "the receipt carries no window context (export it with "
                                     "`tally receipt export SEQ --window-context`)")
        return None
    lines = [line for line in files.context.split("\n") if line]
    records = [line for line in files.context_proofs.split("\n") if line]
    if len(lines) != len(records):
        checks.add("context", False, f"{len(lines)} context events but {len(records)} proof records")
        return None
    events: list[Event] = []
    try:
        for number, (line, record_line) in enumerate(zip(lines, records, strict=True), 1):
            event = event_from_json(read_json(line, f"context line {number}"), f"context line {number}")
            if event.line() != line:
                raise VerificationError(f"context line {number} is not the canonical line of its event", rule="context")
            if event.computed_hash() != event.hash:
                raise VerificationError(f"context event seq {event.seq} does not hash to its hash", rule="context")
            if event.stream != decision.stream or event.seq >= decision.seq:
                raise VerificationError(f"context event seq {event.seq} is not of {decision.stream} before the "
                                        f"decision", rule="context")
            record = read_json(record_line, f"context proof line {number}")
            if not isinstance(record, dict) or record.get("seq") != event.seq:
                raise VerificationError(f"context proof line {number} is not for seq {event.seq}", rule="context")
            verify_inclusion_record(record, event.hash, verified.checkpoint)
            if events and event.seq <= events[-1].seq:
                raise VerificationError(f"context event seq {event.seq} is out of order", rule="context")
            events.append(event)
    except (TallyError, ValueError) as exc:
        checks.add("context", False, f"the window context does not check out: {exc.args[0] if exc.args else exc}")
        return None
    checks.add("context", True, f"{len(events)} window events, each included in the receipt's checkpoint")
    return events


# ---------------------------------------------------------------------- the policy


def _plan(events: Sequence[Event], digest: str, checks: _Checks) -> Plan | None:
    from ..plan.parse import parse_plan

    for event in events:
        if event.type == "window.registered" and event.payload.get("plan_sha256") == digest:
            plan = event.payload.get("plan")
            if not isinstance(plan, dict) or plan_sha256(plan) != digest:
                checks.add("plan", False, f"the registered plan at seq {event.seq} does not hash to {digest[:16]}...")
                return None
            try:
                parsed = parse_plan(plan, path="registered plan")
            except FormatError as exc:
                checks.add("plan", False, f"the registered plan does not parse: {exc.args[0]}")
                return None
            checks.add("plan", True, f"registered at seq {event.seq}, plan {digest[:16]}... (the decision's)")
            return parsed
    checks.add("plan", False, f"the context holds no window.registered with the decision's plan {digest[:16]}...")
    return None


def _path(payload: dict[str, Any], dotted: str) -> Any:
    value: Any = payload
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _measurement(payload: dict[str, Any], policy: PromotionPolicy, checks: _Checks) -> None:
    from ..decide.compare import diff
    from ..decide.rules import compute

    result = payload.get("result") if isinstance(payload.get("result"), dict) else {}
    data_input = payload.get("input") if isinstance(payload.get("input"), dict) else {}
    assert isinstance(result, dict) and isinstance(data_input, dict)
    rule = payload.get("rule")
    checks.add("rule", rule == policy.rule and result.get("rule") == policy.rule,
               f"rule {rule}, the policy's {policy.rule}")
    decision = result.get("decision")
    reasons = result.get("reasons") if isinstance(result.get("reasons"), list) else []
    assert isinstance(reasons, list)
    checks.add("decision", decision == "WIN", f"decision {decision}" + (
        "" if decision == "WIN" or not reasons else f" ({str(reasons[-1])[:300]})"))
    if policy.recompute:
        try:
            differences = list(diff(result, compute(data_input)))
        except FormatError as exc:
            checks.add("recompute", False, f"the recorded input is not a valid rule input: {exc.args[0]}")
        else:
            checks.add("recompute", not differences,
                       "the result recomputed from the recorded input matches" if not differences else
                       f"the recorded result differs from the recomputed one: {differences[0]}")
    cells = result.get("cells") if isinstance(result.get("cells"), dict) else {}
    assert isinstance(cells, dict)
    listed = data_input.get("decision_cells")
    decision_cells = [str(c) for c in (listed if isinstance(listed, list) and listed else cells)]
    wanted = policy.metric_roles
    problems = []
    if policy.cells and sorted(policy.cells) != sorted(decision_cells):
        problems.append(f"decision cells {', '.join(decision_cells)}, the policy's {', '.join(policy.cells)}")
    for cell in decision_cells:
        metrics = cells.get(cell, {}).get("metrics") if isinstance(cells.get(cell), dict) else None
        roles = {m: v.get("role") for m, v in metrics.items() if isinstance(v, dict)} if isinstance(metrics, dict) \
            else {}
        if roles != wanted:
            missing = [m for m in wanted if m not in roles]
            wrong = [f"{m} is {roles[m]}, not {r}" for m, r in wanted.items() if m in roles and roles[m] != r]
            extra = [m for m in roles if m not in wanted]
            parts = ([f"missing {', '.join(missing)}"] if missing else []) + wrong + \
                ([f"not in the policy: {', '.join(extra)}"] if extra else [])
            problems.append(f"{cell}: {'; '.join(parts) or 'no metrics'}")
    checks.add("metric_set", not problems, "; ".join(problems) if problems else
               f"every decision cell ({', '.join(decision_cells)}) decides on {policy.primary}, guards "
               f"{', '.join(policy.guards) or 'none'}, reports {', '.join(policy.reported) or 'none'}")
    absent = [p for p in policy.recorded_fields if _path(payload, p) is None]
    if policy.recorded_fields:
        checks.add("recorded_fields", not absent, f"not recorded: {', '.join(absent)}" if absent else
                   f"recorded: {', '.join(policy.recorded_fields)}")
    _clocks(data_input, policy, checks)
    _archive(result, decision_cells, policy, checks)


def _clocks(data_input: dict[str, Any], policy: PromotionPolicy, checks: _Checks) -> None:
    starts = data_input.get("starts") if isinstance(data_input.get("starts"), dict) else {}
    assert isinstance(starts, dict)
    caps = {s: _int(v.get("clock_cap_mhz")) if isinstance(v, dict) else None for s, v in starts.items()}
    production = _int(data_input.get("production_clock_cap_mhz"))
    shown = ", ".join(f"{s} {c if c is not None else 'unknown'}" for s, c in caps.items())
    if policy.same_cap:
        same = bool(caps) and None not in caps.values() and len(set(caps.values())) == 1
        checks.add("clocks.same_cap", same, f"starts at {shown} MHz" + ("" if same else ": not one same-clock cap"))
    if policy.production_cap:
        ok = production is not None and bool(caps) and all(c == production for c in caps.values())
        checks.add("clocks.production_cap", ok, f"production's cap {production} MHz; starts at {shown} MHz")
    if policy.no_thermal_dialback:
        dialbacks = data_input.get("thermal_dialbacks_in_hold")
        checks.add("clocks.thermal", dialbacks == 0,
                   f"{dialbacks if dialbacks is not None else 'unrecorded'} thermal dial-back(s) inside the HOLD")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _archive(result: dict[str, Any], cells: Sequence[str], policy: PromotionPolicy, checks: _Checks) -> None:
    if not (policy.require_day_to_day or policy.max_day_to_day is not None):
        return
    spread = result.get("spread") if isinstance(result.get("spread"), dict) else {}
    assert isinstance(spread, dict)
    problems, shown = [], []
    for cell in cells:
        day = spread.get(cell, {}).get("archive_day_to_day") if isinstance(spread.get(cell), dict) else None
        if not isinstance(day, int | float):
            if policy.require_day_to_day:
                problems.append(f"{cell}: no archive day-to-day spread")
            continue
        shown.append(f"{cell} {day:.2%}")
        if policy.max_day_to_day is not None and day > policy.max_day_to_day:
            problems.append(f"{cell}: archive day-to-day spread {day:.2%} over {policy.max_day_to_day:.2%}")
    checks.add("archive", not problems, "; ".join(problems) if problems else
               f"archive day-to-day spread {', '.join(shown) or 'not required'}")


def _gate_at(events: Sequence[Event], seq: Any) -> Event | None:
    return next((e for e in events if e.seq == seq and e.type == "gate.result"), None)


def _admission(events: Sequence[Event], plan: Plan, digest: str, policy: PromotionPolicy, checks: _Checks) -> None:
    admitted = next((e for e in events if e.type == "window.admitted" and e.payload.get("plan_sha256") == digest),
                    None)
    if admitted is None:
        checks.add("gates", False, "the context holds no window.admitted for the decision's plan")
        return
    gates = admitted.payload.get("gates") if isinstance(admitted.payload.get("gates"), dict) else {}
    assert isinstance(gates, dict)
    found: dict[str, Event] = {}
    problems = []
    for gate in policy.gates:
        event = _gate_at(events, gates.get(gate))
        if event is None or event.payload.get("gate") != gate:
            problems.append(f"{gate}: not among the gates that admitted the window")
        elif event.payload.get("verdict") != "PASS":
            problems.append(f"{gate}: {event.payload.get('verdict')} at seq {event.seq}")
        else:
            found[gate] = event
    checks.add("gates", not problems, "; ".join(problems) if problems else
               f"admitted at seq {admitted.seq} on {', '.join(f'{g} PASS (seq {e.seq})' for g, e in found.items())}")
    qualification = found.get("qualification")
    if qualification is not None:
        _binding(qualification, admitted, plan, checks)
    rng = found.get("rng")
    if rng is not None and qualification is not None:
        _rng(rng, qualification, policy, checks)


def _binding(gate: Event, admitted: Event, plan: Plan, checks: _Checks) -> None:
    evidence = gate.payload.get("evidence") if isinstance(gate.payload.get("evidence"), dict) else {}
    assert isinstance(evidence, dict)
    receipt = evidence.get("admission") if isinstance(evidence.get("admission"), dict) else {}
    assert isinstance(receipt, dict)
    commit, carried, head = receipt.get("commit"), evidence.get("qualified_commit"), evidence.get("head")
    problems = []
    if receipt.get("verdict") != "QUALIFIED":
        problems.append(f"the admission receipt says {receipt.get('verdict')}, not QUALIFIED")
    if not isinstance(commit, str) or commit != carried:
        problems.append(f"the admission receipt's commit {str(commit)[:12]} is not the carried commit "
                        f"{str(carried)[:12]}")
    if head != plan.commit or admitted.payload.get("commit") != plan.commit:
        problems.append(f"carried to {str(head)[:12]}, admitted at {str(admitted.payload.get('commit'))[:12]}, "
                        f"not the plan's commit {plan.commit[:12]}")
    checks.add("qualification_binding", not problems, "; ".join(problems) if problems else
               f"the admission receipt's commit {str(commit)[:12]} is the carried commit, carried to the plan's "
               f"commit {plan.commit[:12]} (receipt {str(receipt.get('sha256'))[:16]}...)")


def _rng(gate: Event, qualification: Event, policy: PromotionPolicy, checks: _Checks) -> None:
    evidence = gate.payload.get("evidence") if isinstance(gate.payload.get("evidence"), dict) else {}
    assert isinstance(evidence, dict)
    get: Callable[[Any, str], Any] = lambda obj, key: obj.get(key) if isinstance(obj, dict) else None  # noqa: E731
    admission = get(get(qualification.payload, "evidence"), "admission")
    problems = []
    if get(get(evidence, "admission"), "sha256") != get(admission, "sha256"):
        problems.append("the RNG gate read another admission receipt than the qualification")
    rng = get(evidence, "rng")
    if get(rng, "kernel_sha256") != get(admission, "prepared_verifier_sha256") or get(rng, "kernel_sha256") is None:
        problems.append("the RNG receipt's kernel is not the admission's prepared verifier")
    tests = get(rng, "tests")
    passed = {str(get(t, "name")) for t in tests if get(t, "outcome") == "passed"} if isinstance(tests, list) \
        else set()
    missing = [t for t in policy.rng_tests if t not in passed]
    if missing:
        problems.append(f"RNG tests not listed as passed: {', '.join(missing)}")
    checks.add("rng_binding", not problems, "; ".join(problems) if problems else
               f"the RNG receipt's kernel is the admission's prepared verifier"
               f"{f'; all {len(policy.rng_tests)} policy tests passed' if policy.rng_tests else ''}")


def _starts(events: Sequence[Event], data_input: dict[str, Any], checks: _Checks) -> None:
    """The decision input's clock caps are the ones the starts recorded."""
    starts = data_input.get("starts") if isinstance(data_input.get("starts"), dict) else {}
    assert isinstance(starts, dict)
    began = {str(e.payload.get("start")): _int(e.payload.get("clock_cap_mhz")) for e in events
             if e.type == "start.began"}
    wrong = [s for s, v in starts.items()
             if isinstance(v, dict) and (s not in began or began[s] != _int(v.get("clock_cap_mhz")))]
    checks.add("clocks.recorded", not wrong, "every start's cap is the one its start.began recorded" if not wrong
               else f"the decision input's cap differs from start.began for {', '.join(wrong)}")


def _looks(events: Sequence[Event] | None, digest: str, payload: dict[str, Any], verified: VerifiedReceipt,
           event: Event, policy: PromotionPolicy, ledger: VerifiedBundle | None, ledger_error: str | None,
           checks: _Checks) -> dict[str, Any]:
    from ..decide.rules import compute
    from .looks import looks_checks

    plan_json = next((e.payload.get("plan") for e in events or () if e.type == "window.registered"
                      and e.payload.get("plan_sha256") == digest), None)
    data_input = payload.get("input")
    try:
        recomputed = compute(data_input) if isinstance(data_input, dict) else None
    except FormatError:
        recomputed = None
    outcome = looks_checks(policy.looks, policy.name, ledger, ledger_error, verified, event, plan_json, recomputed)
    for name, ok, detail in outcome.checks:
        checks.add(name, ok, detail)
    return outcome.summary


def check_promotion(files: ReceiptFiles, policy: PromotionPolicy, ledger: VerifiedBundle | None = None,
                    ledger_error: str | None = None) -> PromotionResult:
    """Every check of the promotion gate, in order; PROMOTABLE only if every one holds.

    ``ledger``: the presented ledger, a verified full bundle (``ledger.bundle.verify_bundle``) the looks are
    counted in; ``ledger_error``: why the bundle presented did not verify."""
    checks = _Checks()
    verified = _verify(files, policy, checks)
    if verified is None or verified.event is None:
        return PromotionResult(policy, tuple(checks.items), files.seq)
    event = verified.event
    receipt = {"origin": verified.origin, "seq": verified.seq, "event_hash": verified.event_hash,
               "type": event.type, "checkpoint": verified.checkpoint.to_json()}
    if not checks.add("event", event.type == "decision.recorded", f"the receipt is of a {event.type} event"):
        return PromotionResult(policy, tuple(checks.items), files.seq, receipt=receipt)
    payload = event.payload
    window = payload.get("window") if isinstance(payload.get("window"), str) else None
    digest = str(payload.get("plan_sha256"))
    events = _context(files, verified, event, checks)
    plan = _plan(events, digest, checks) if events is not None else None
    if plan is not None:
        checks.add("mode", plan.mode in policy.modes,
                   f"mode {plan.mode} (the registered plan); the policy accepts {', '.join(policy.modes)}")
    _measurement(payload, policy, checks)
    if events is not None and plan is not None:
        _admission(events, plan, digest, policy, checks)
        data_input = payload.get("input")
        _starts(events, data_input if isinstance(data_input, dict) else {}, checks)
    looks = _looks(events, digest, payload, verified, event, policy, ledger, ledger_error, checks)
    return PromotionResult(policy, tuple(checks.items), files.seq, window, receipt, looks)
