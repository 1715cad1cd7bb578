"""Host identities an arm declares (worker and Markov identity hashes, experiment commit, worker tree)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import FormatError
from runner.audit.full import run_audit
from runner.plan.parse import parse_plan

from .worlds import close, gate_all, run, small, state, window, world

WINDOW = "ids"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "seed000-controlled.toml"
WORKER = "be2c1436fa9f9e66b398e1b1da2e140e6fddc82a11939e2ac4240a0ca79543bd"
MARKOV = "0b6e71e638abd5abce2db433965bb5ff523cbbe92ed7ae54324a50ccaeffa19a"
COMMIT = "85b0d96ddf5bd3c2870eae7af092d679b00a6c26"
TREE = "/opt/dsv41/x86host-data/pp4/admission-85b0d96ddf5b/repo"
DECLARED = (f'worker_identity = "{WORKER}"\nmarkov_identity = "{MARKOV}"\nexperiment_commit = "{COMMIT}"\n'
            f'worker_tree = "{TREE}"\n')


def declare(text: str) -> str:
    """Every arm of the plan declares the four identities."""
    return small(text).replace("[[arms]]\n", "[[arms]]\n" + DECLARED)


def _events(w: Any, type_: str) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=[type_])]


def test_declared_identities_reported_equal_pass_every_start(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=declare)])
    try:
        gate_all(w)
        result = run(w, WINDOW)
        assert result.ending == "restored", result.blocked
        gates = [g for g in _events(w, "gate.result") if g["gate"] == "start_config"]
        assert len(gates) == 3 and all(g["verdict"] == "PASS" for g in gates)
        assert gates[0]["evidence"]["identities"]["reported"] == {
            "worker_identity": WORKER, "markov_identity": MARKOV, "experiment_commit": COMMIT, "worker_tree": TREE}
    finally:
        close(w)


def test_a_start_reporting_another_worker_identity_fails_and_the_window_ends_safely(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=declare)])
    try:
        gate_all(w)
        w.sim.set_faults(identity_mismatch={"member": "worker_identity", "value": "f" * 64})
        result = run(w, WINDOW)
        assert result.ending == "aborted" and result.decision == "REJECT"
        gate = next(g for g in _events(w, "gate.result") if g["gate"] == "start_config")
        assert gate["verdict"] == "FAIL" and f"worker_identity '{'f' * 64}' is not arm" in gate["summary"]
        assert not _events(w, "wave.measured")
        assert state(w.book).production == "up" and state(w.book).hold is None
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def test_a_start_that_reports_no_declared_identity_fails(tmp_path: Path) -> None:
    from runner.gates.start_config import check_start_config

    plan = parse_plan(tomllib.loads(declare(EXAMPLE.read_text())))
    arm = plan.arm("B")
    checked = check_start_config("s2", arm, {"config_digest": arm.config_digest,
                                             "speculative_config": arm.speculative}, None)
    assert checked.verdict == "FAIL"
    assert sum("the host did not report its" in f for f in checked.failures) == 4


def test_a_malformed_declared_identity_is_refused_at_parse() -> None:
    text = declare(EXAMPLE.read_text()).replace(WORKER, "not-a-hash", 1)
    with pytest.raises(FormatError, match="worker_identity"):
        parse_plan(tomllib.loads(text))
