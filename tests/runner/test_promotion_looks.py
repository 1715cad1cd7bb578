"""Looks counted from a ledger's events: the candidate's every window, and no other candidate's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.promotion import Candidate, candidate_of, count_looks

DIGEST = "1f3d1794386b1163334c6a363cd5fa7e3d2f904bd984538eecef139d9257f9b4"
OTHER_DIGEST = "ac84c46ff2e1d2fc2f94a831ca0e5ed684bd45205d38bf6ae28d27b1e9acda0f"
COMMIT = "3f1c9a7e5b2d4c6a8e0f1b3d5c7e9a1b2c4d6e8f"
OTHER_COMMIT = "0" * 40


@dataclass
class E:
    seq: int
    stream: str
    type: str
    payload: dict[str, Any] = field(default_factory=dict)


def plan(digest: str, commit: str, mode: str = "production-policy") -> dict[str, Any]:
    control = "P" if mode == "production-policy" else "A"
    return {"commit": commit, "mode": mode, "arms": [{"role": control, "config_digest": OTHER_DIGEST},
                                                    {"role": "B", "config_digest": digest}]}


class Book:
    def __init__(self) -> None:
        self.events: list[E] = []

    def add(self, stream: str, type_: str, payload: dict[str, Any]) -> int:
        self.events.append(E(len(self.events) + 1, stream, type_, payload))
        return len(self.events)

    def window(self, wid: str, digest: str, commit: str, decision: str | None, *, mode: str = "production-policy",
               started: bool = True) -> int | None:
        sha = f"{abs(hash((wid, digest, commit))):064d}"[-64:]
        self.add(f"window/{wid}", "window.registered", {"plan_sha256": sha, "plan": plan(digest, commit, mode)})
        first = self.add(f"window/{wid}", "start.began", {"start": "s1"}) if started else None
        if decision is None:
            return first
        return self.add(f"window/{wid}", "decision.recorded", {"plan_sha256": sha, "result": {"decision": decision}})


def test_looks_are_every_window_of_the_candidate_whatever_its_verdict() -> None:
    book = Book()
    book.add("promotion", "promotion.registered", {"policy": "P"})
    mine = [book.window("chain-1", DIGEST, COMMIT, "NO_CHANGE"),        # chained windows ...
            book.window("chain-2", DIGEST, COMMIT, "LOSS", mode="controlled"),
            book.window("chain-3", DIGEST, COMMIT, "REJECT")]           # ... the last aborted
    book.window("other-digest", OTHER_DIGEST, COMMIT, "WIN")             # another config digest
    book.window("other-commit", DIGEST, OTHER_COMMIT, "WIN")             # another candidate (its commit)
    mine.append(book.window("separate", DIGEST, COMMIT, "INCONCLUSIVE"))  # a separate window of the candidate
    mine.append(book.window("running", DIGEST, COMMIT, None))             # measured, not (yet) decided
    book.window("registered-only", DIGEST, COMMIT, None, started=False)   # never measured: no look
    mine.append(book.window("best", DIGEST, COMMIT, "WIN"))
    looks = count_looks(book.events, Candidate(DIGEST, COMMIT), upto=len(book.events))
    assert [look.seq for look in looks] == sorted(s for s in mine if s is not None)
    assert [look.decision for look in looks] == ["NO_CHANGE", "LOSS", "REJECT", "INCONCLUSIVE", None, "WIN"]
    assert [look.window for look in looks][-1] == "best"
    # the count covers the tree presented: nothing after it
    assert len(count_looks(book.events, Candidate(DIGEST, COMMIT), upto=mine[2] or 0)) == 3
    assert len(count_looks(book.events, Candidate(OTHER_DIGEST, COMMIT), upto=len(book.events))) == 1


def test_a_candidate_is_arm_bs_declared_digest_and_the_experiment_commit() -> None:
    assert candidate_of(plan(DIGEST, COMMIT)) == Candidate(DIGEST, COMMIT)
    assert candidate_of({"commit": COMMIT, "arms": [{"role": "A", "config_digest": DIGEST}]}) is None
    assert candidate_of({"commit": 7, "arms": []}) is None and candidate_of("plan") is None
