"""The RNG gate (``docs/gates.md``): a PASS RNG receipt at HEAD whose kernel matches the admission's verifier.

PASS only if the RNG receipt says PASS, was produced at the plan's commit (HEAD), lists at
least one test (a receipt with ``"tests": []`` proves nothing: fail closed), lists every
test the plan registers (``gates.rng_tests``) and every test it lists passed, and its
``kernel_sha256`` equals the admission receipt's ``prepared_verifier_sha256``. Missing and
failed tests are named. Receipt formats: ``runner.gates.receipts`` / docs/gates.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..vocabulary import GateVerdict
from .gate import Finding
from .receipts import AdmissionReceipt, RngReceipt, read_admission_receipt, read_rng_receipt

if TYPE_CHECKING:
    from ledger.store import Ledger

    from ..plan.model import Plan

__all__ = ["RngGate", "RngResult", "check_rng"]


@dataclass(frozen=True)
class RngResult:
    verdict: GateVerdict
    evidence: dict[str, Any]
    failures: tuple[str, ...]

    @property
    def summary(self) -> str:
        kernel = self.evidence["rng"]["kernel_sha256"][:16]
        return f"{self.verdict}: kernel {kernel}..." + (f"; {'; '.join(self.failures)}" if self.failures else "")


def check_rng(receipt: RngReceipt, admission: AdmissionReceipt, head: str,
              required_tests: Sequence[str] = ()) -> RngResult:
    """The RNG gate's verdict; ``required_tests`` are the plan's ``gates.rng_tests``."""
    failures = []
    if receipt.verdict != "PASS":
        failures.append(f"RNG receipt says {receipt.verdict}, not PASS")
    if receipt.commit != head:
        failures.append(f"RNG receipt is for {receipt.commit[:12]}, not HEAD {head[:12]}")
    if not receipt.tests:
        failures.append("the RNG receipt lists no tests")
    listed = {name for name, _ in receipt.tests}
    missing = [name for name in required_tests if name not in listed]
    if missing:
        failures.append(f"required tests missing from the receipt: {', '.join(missing)}")
    failed = list(dict.fromkeys(name for name, outcome in receipt.tests if outcome != "passed"))
    if failed:
        failures.append(f"tests not passed: {', '.join(failed)}")
    prepared = admission.prepared_verifier_sha256
    if prepared is None:
        failures.append("the admission receipt names no prepared_verifier_sha256")
    elif receipt.kernel_sha256 != prepared:
        failures.append(f"kernel {receipt.kernel_sha256[:16]}... differs from the admission's prepared verifier "
                        f"{prepared[:16]}...")
    evidence = {"rng": receipt.to_json(), "admission": admission.to_json(), "head": head, "failures": failures}
    if required_tests:
        evidence["required_tests"] = list(required_tests)
        evidence["missing_tests"] = missing
    return RngResult("FAIL" if failures else "PASS", evidence, tuple(failures))


@dataclass(frozen=True)
class RngGate:
    """The gate: the RNG receipt against the admission receipt, at the plan's commit, for its ``rng_tests``."""

    receipt: Path
    admission: Path

    def check(self, ledger: Ledger, plan: Plan) -> Finding:
        result = check_rng(read_rng_receipt(self.receipt), read_admission_receipt(self.admission), plan.commit,
                           plan.rng_tests)
        return Finding("rng", result.verdict, result.summary, result.evidence, commit=plan.commit)
