"""Looks counted (``docs/promotion.md``, looks): every window a ledger decided for the candidate, and the budget.

A candidate is identified across windows by its declared config digest (arm B's
``config_digest``) and the experiment commit (the plan's ``commit``). Every window of the
presented ledger whose registered plan names that candidate and that was decided
(``decision.recorded``, whatever its verdict) is a look; so is one that began a start and
has no decision in the ledger presented (its data exists). The presented decision is look
``i`` of them (by seq); it may promote only if it passes the level the policy's registered
budget gives look ``i`` (``runner.decide.spending``), recomputed from its recorded input.

The ledger is presented as a full export bundle (``tally export``), verified by the
caller; here its first ``N`` events (``N`` the receipt's checkpoint size) must hash to the
receipt's checkpoint root, so the count covers every event of that tree, none left out.
The budget must be registered (``promotion.registered`` on stream ``promotion``) before the
candidate's first look.

Pure: events in, checks out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger import merkle
from ledger.errors import FormatError

from ..decide.spending import LookBudget, look_test

if TYPE_CHECKING:
    from ledger.bundle import VerifiedBundle
    from ledger.event import Event
    from ledger.receipt import VerifiedReceipt

__all__ = ["POLICY_EVENT", "POLICY_STREAM", "Candidate", "Look", "candidate_of", "count_looks", "looks_checks",
           "registration_payload"]

POLICY_STREAM = "promotion"
POLICY_EVENT = "promotion.registered"
_WINDOW = "window/"


@dataclass(frozen=True)
class Candidate:
    """What identifies a candidate across windows: its declared config digest and the experiment commit."""

    config_digest: str
    commit: str

    def to_json(self) -> dict[str, str]:
        return {"config_digest": self.config_digest, "commit": self.commit}


@dataclass(frozen=True)
class Look:
    seq: int                 # its decision.recorded (or, undecided, its first start.began)
    window: str
    decision: str | None     # None: began a start, no decision in the ledger presented

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "window": self.window, "decision": self.decision}


def candidate_of(plan: Any) -> Candidate | None:
    """The candidate a registered plan (its JSON) measures: arm B's declared digest and the plan's commit."""
    if not isinstance(plan, Mapping):
        return None
    commit = plan.get("commit")
    arms = plan.get("arms")
    if not isinstance(commit, str) or not isinstance(arms, list):
        return None
    digests = [a.get("config_digest") for a in arms if isinstance(a, Mapping) and a.get("role") == "B"]
    if len(digests) != 1 or not isinstance(digests[0], str):
        return None
    return Candidate(digests[0], commit)


def registration_payload(name: str, policy_sha256: str, budget: LookBudget) -> dict[str, Any]:
    """The payload of a ``promotion.registered`` event: the policy's name, its file's digest, the budget."""
    return {"policy": name, "policy_sha256": policy_sha256, "looks": budget.to_json()}


def _registered_budget(payload: Mapping[str, Any]) -> LookBudget | None:
    looks = payload.get("looks")
    if not isinstance(looks, Mapping):
        return None
    alpha, most, spending = looks.get("alpha"), looks.get("max_looks"), looks.get("spending")
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or isinstance(most, bool) \
            or not isinstance(most, int) or not isinstance(spending, str):
        return None
    try:
        return LookBudget(float(alpha), most, spending)
    except ValueError:
        return None


def count_looks(events: Sequence[Any], candidate: Candidate, *, upto: int) -> list[Look]:
    """Every look of ``candidate`` among ``events`` (``Event``s, seq order) with seq at most ``upto``."""
    plans: dict[str, Candidate | None] = {}
    decided: dict[str, Look] = {}
    began: dict[str, int] = {}
    windows: dict[str, Candidate | None] = {}
    for event in events:
        if event.seq > upto or not event.stream.startswith(_WINDOW):
            continue
        window = event.stream[len(_WINDOW):]
        payload = event.payload
        if event.type == "window.registered":
            digest = payload.get("plan_sha256")
            if isinstance(digest, str):
                plans[digest] = candidate_of(payload.get("plan"))
            windows[window] = plans.get(digest) if isinstance(digest, str) else None
        elif event.type == "decision.recorded" and window not in decided:
            digest = payload.get("plan_sha256")
            if isinstance(digest, str) and plans.get(digest) == candidate:
                result = payload.get("result")
                verdict = result.get("decision") if isinstance(result, Mapping) else None
                decided[window] = Look(event.seq, window, str(verdict) if verdict is not None else None)
        elif event.type == "start.began" and window not in began and windows.get(window) == candidate:
            began[window] = event.seq
    looks = list(decided.values())
    looks += [Look(seq, window, None) for window, seq in began.items() if window not in decided]
    return sorted(looks, key=lambda look: look.seq)


@dataclass(frozen=True)
class LooksOutcome:
    """The looks checks and what the receipt's JSON carries of them."""

    checks: tuple[tuple[str, bool, str], ...]
    summary: dict[str, Any]


def _tree_root(events: Sequence[Any], size: int) -> bytes:
    return merkle.root_from_leaves(merkle.hash_leaf(bytes.fromhex(e.hash)) for e in events[:size])


def looks_checks(budget: LookBudget | None, policy_name: str, ledger: VerifiedBundle | None,
                 ledger_error: str | None, receipt: VerifiedReceipt, decision: Event, plan_json: Any,
                 recomputed: Mapping[str, Any] | None) -> LooksOutcome:
    """The three looks checks: ``looks.ledger`` (the presented ledger covers the receipt's tree),
    ``looks.registered`` (the budget registered before the first look), ``looks.budget`` (the presented look
    passes its spent level). ``ledger``: a verified full bundle (``ledger.bundle.VerifiedBundle``) or ``None``."""
    checks: list[tuple[str, bool, str]] = []
    summary: dict[str, Any] = {"budget": None if budget is None else budget.to_json()}
    if budget is None:
        checks.append(("looks", False, f"policy {policy_name} registers no error budget over looks ([looks]): a WIN "
                                       "presented after any number of looks is not controlled"))
        return LooksOutcome(tuple(checks), summary)
    checkpoint = receipt.checkpoint
    size = checkpoint.size
    summary["ledger"] = {"origin": receipt.origin, "checkpoint_size": size, "checkpoint_root": checkpoint.root.hex()}
    if ledger is None:
        checks.append(("looks.ledger", False, ledger_error or "no ledger presented (--ledger BUNDLE, a full "
                                                              "`tally export`): the candidate's looks cannot be "
                                                              "counted"))
        return LooksOutcome(tuple(checks), summary)
    events = ledger.events
    problems = []
    if ledger.partial:
        problems.append("the bundle is a partial (--stream) export: it cannot show every look")
    elif ledger.origin != receipt.origin:
        problems.append(f"the bundle is of ledger {ledger.origin}, the receipt of {receipt.origin}")
    elif len(events) < size:
        problems.append(f"the bundle holds {len(events)} events, fewer than the receipt's checkpoint size {size}: "
                        "export the ledger after the checkpoint")
    elif _tree_root(events, size) != checkpoint.root:
        problems.append(f"the bundle's first {size} events do not hash to the receipt's checkpoint root")
    elif events[decision.seq - 1].hash != decision.hash:
        problems.append(f"the bundle's event {decision.seq} is not the receipt's decision")
    if problems:
        checks.append(("looks.ledger", False, "; ".join(problems)))
        return LooksOutcome(tuple(checks), summary)
    checks.append(("looks.ledger", True, f"ledger {receipt.origin}: the count covers its first {size} events, the "
                                         f"receipt's checkpoint (root {checkpoint.root.hex()[:16]}...)"))
    if plan_json is None:      # no window context: the checks that read it are not run (context fails)
        return LooksOutcome(tuple(checks), summary)
    candidate = candidate_of(plan_json)
    if candidate is None:
        checks.append(("looks.budget", False, "the registered plan names no single candidate (arm B) and commit"))
        return LooksOutcome(tuple(checks), summary)
    covered = events[:size]
    looks = count_looks(covered, candidate, upto=size)
    index = next((i for i, look in enumerate(looks, 1) if look.seq == decision.seq), None)
    summary.update(candidate=candidate.to_json(), count=len(looks), seqs=[look.seq for look in looks],
                   looks=[look.to_json() for look in looks], index=index)
    _registration(covered, budget, policy_name, looks, checks, summary)
    if index is None or recomputed is None:
        checks.append(("looks.budget", False, "the decision is not among the candidate's looks" if index is None
                       else "the recorded input is not a valid rule input"))
        return LooksOutcome(tuple(checks), summary)
    test = look_test(budget, index, _differences(recomputed), _bar(recomputed))
    summary["test"] = test.to_json()
    spent = budget.spent(index)
    shown = ", ".join(str(look.seq) for look in looks)
    checks.append(("looks.budget", test.passes,
                   f"look {index} of {len(looks)} of candidate {candidate.config_digest[:12]} at commit "
                   f"{candidate.commit[:12]} (decisions at seq {shown}); {budget.spending} spends "
                   f"{test.alpha:.5f} of alpha {budget.alpha} here ({spent:.5f} by this look, "
                   f"{budget.max_looks} looks at most): {test.reason}"))
    return LooksOutcome(tuple(checks), summary)


def _registration(events: Sequence[Any], budget: LookBudget, name: str, looks: Sequence[Look],
                  checks: list[tuple[str, bool, str]], summary: dict[str, Any]) -> None:
    first = next((e for e in events if e.stream == POLICY_STREAM and e.type == POLICY_EVENT
                  and isinstance(e.payload, Mapping) and e.payload.get("policy") == name), None)
    if first is None:
        checks.append(("looks.registered", False, f"the ledger holds no {POLICY_EVENT} of policy {name} "
                                                  "(`tally promote register`)"))
        return
    summary["registered_seq"] = first.seq
    registered = _registered_budget(first.payload)
    before = looks[0].seq if looks else None
    if registered != budget:
        checks.append(("looks.registered", False, f"the budget registered at seq {first.seq} "
                                                  f"({'unreadable' if registered is None else registered.to_json()}) "
                                                  f"is not the policy's ({budget.to_json()})"))
    elif before is not None and first.seq > before:
        checks.append(("looks.registered", False, f"policy {name} was registered at seq {first.seq}, after the "
                                                  f"candidate's first look at seq {before}"))
    else:
        checks.append(("looks.registered", True, f"policy {name}'s budget (alpha {budget.alpha}, {budget.max_looks} "
                                                 f"looks, {budget.spending}) registered at seq {first.seq}, before "
                                                 f"the first look{f' (seq {before})' if before is not None else ''}"))


def _bar(result: Mapping[str, Any]) -> float:
    params = result.get("params")
    bar = params.get("bar") if isinstance(params, Mapping) else None
    if isinstance(bar, bool) or not isinstance(bar, int | float) or not math.isfinite(bar):
        raise FormatError("the recomputed result carries no bar")
    return float(bar)


def _differences(result: Mapping[str, Any]) -> dict[str, list[float | None] | None]:
    """Per decision cell the paired differences of its primary (the metric whose role is ``primary``: the
    ``metric_set`` check holds it to the policy's), signed so that higher is better."""
    out: dict[str, list[float | None] | None] = {}
    cells = result.get("cells")
    for cell, body in (cells.items() if isinstance(cells, Mapping) else ()):
        metrics = body.get("metrics") if isinstance(body, Mapping) else None
        metric = next((m for m in metrics.values() if isinstance(m, Mapping) and m.get("role") == "primary"), None) \
            if isinstance(metrics, Mapping) else None
        d = metric.get("d") if isinstance(metric, Mapping) else None
        sign = -1.0 if isinstance(metric, Mapping) and metric.get("direction") == "lower" else 1.0
        out[str(cell)] = [None if x is None else sign * float(x) for x in d] if isinstance(d, list) else None
    return out
