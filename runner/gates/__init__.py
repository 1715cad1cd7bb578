"""The gates checked before a window opens, behind one protocol, and admission (``docs/gates.md``).

::

    from runner.gates import BudgetGate, RngGate, run_gate

    outcome = run_gate(ledger, signer, "w1", RngGate(receipt=Path("rng.json"), admission=Path("admission.json")))
    outcome.verdict, outcome.summary, outcome.record.event.seq
    run_gate(ledger, signer, "w1", BudgetGate()).record.admitted   # set once the last required gate passed

A :class:`Gate` (``gate``) is built with what it reads and ``check(ledger, plan)`` returns
its :class:`Finding`, appending nothing; ``run_gate`` (``record``) checks one against the
window's registered plan and appends its ``gate.result``; ``admission`` admits the window
when every gate its plan requires passed at its commit. The gates: ``QualificationGate``
(``qualification``, with the ``receipts`` it reads), ``RngGate`` (``rng``), ``BudgetGate``
(``budget``), ``PowerGate`` (``power``), ``StandardSpecGate`` (``spec``), ``RehearsalGate``
(``rehearsed``: a rehearsal's result, ``runner.rehearsal``), ``ChainPrevOkGate``
(``chain``). At a start the runner checks ``start_config`` and ``standard_spec`` on what the
host reported, and reads the clock caps and dial-backs (``clocks``); every check is pure
where it can be: facts in, verdict out.
"""

from __future__ import annotations

from .admission import Admission, GateRecord, admit, record_gate
from .budget import BudgetGate, BudgetReport, budget_report
from .chain import ChainPrevOkGate, PrevOk, PrevOkRecord, check_prev_ok, run_prev_ok
from .clocks import ClockReading, new_dial_backs, read_caps, restored_clock
from .effective import check_effective, check_warmup_served, context_problems
from .gate import Finding, Gate
from .power import PowerCheck, PowerGate, check_power, describe, power_gate, replay_power_gate
from .qualification import QualificationGate
from .receipts import AdmissionReceipt, RngReceipt, read_admission_receipt, read_rng_receipt
from .record import GateOutcome, record_finding, run_gate
from .rehearsed import RehearsalGate
from .rng import RngGate, check_rng
from .spec import SpecResult, StandardSpecGate, check_standard_spec, spec_sha256
from .start_config import check_start_config, spec_reported

__all__ = [
    "Admission",
    "AdmissionReceipt",
    "BudgetGate",
    "BudgetReport",
    "ChainPrevOkGate",
    "ClockReading",
    "Finding",
    "Gate",
    "GateOutcome",
    "GateRecord",
    "PowerCheck",
    "PowerGate",
    "PrevOk",
    "PrevOkRecord",
    "QualificationGate",
    "RehearsalGate",
    "RngGate",
    "RngReceipt",
    "SpecResult",
    "StandardSpecGate",
    "admit",
    "budget_report",
    "check_effective",
    "check_power",
    "check_prev_ok",
    "check_rng",
    "check_standard_spec",
    "check_start_config",
    "check_warmup_served",
    "context_problems",
    "describe",
    "new_dial_backs",
    "power_gate",
    "read_admission_receipt",
    "read_caps",
    "read_rng_receipt",
    "record_finding",
    "record_gate",
    "replay_power_gate",
    "restored_clock",
    "run_gate",
    "run_prev_ok",
    "spec_reported",
    "spec_sha256",
]
