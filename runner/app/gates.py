"""Recording a gate: check one against a window's registered plan and append its ``gate.result``.

::

    from runner.app import Session, record_rng

    outcome = record_rng(Session(db="tally.db"), "w1", receipt=Path("rng.json"), admission=Path("admission.json"))
    outcome.verdict, outcome.record.event.seq, outcome.record.admitted   # admitted after its last required gate

One function per ``tally gate ...`` command, ``tally rehearse`` and ``tally chain``; each
refuses an unknown window first, checks its gate (``runner.gates``) and records what it found.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError

from .files import read_bounded, read_json_arg
from .outdir import check_out
from .session import registered, site_driver

if TYPE_CHECKING:
    from ..gates import Finding, GateOutcome, GateRecord, PrevOk, PrevOkRecord
    from ..rehearsal import ProbeList, Rehearsal
    from .session import Session

__all__ = ["RehearsalRun", "chain_preflight_report", "check_chain_prev_ok", "check_power_gate", "record_budget",
           "record_chain_prev_ok", "record_power", "record_qualification", "record_rng", "record_standard_spec",
           "rehearse_production"]


def record_qualification(session: Session, window: str, *, repo: Path, qualified_commit: str, admission: Path,
                         head: str | None = None, files: tuple[str, ...] = (), prefixes: tuple[str, ...] = (),
                         units: tuple[str, ...] = ()) -> GateOutcome:
    """Carry a QUALIFIED admission at Q to HEAD (carried files: the plan's unless any are given)."""
    from ..gates import QualificationGate, run_gate
    from ..plan import Carry

    book, signer = session.ledger_and_signer()
    registered(book, window)
    carry = Carry(files, prefixes, units) if files or prefixes or units else None
    return run_gate(book, signer, window, QualificationGate(repo=repo, qualified_commit=qualified_commit,
                                                            admission=admission, head=head, carry=carry))


def record_rng(session: Session, window: str, *, receipt: Path, admission: Path) -> GateOutcome:
    """A PASS RNG receipt at the plan's commit whose kernel sha256 equals the admission's prepared verifier."""
    from ..gates import RngGate, run_gate

    book, signer = session.ledger_and_signer()
    registered(book, window)
    return run_gate(book, signer, window, RngGate(receipt=receipt, admission=admission))


def record_budget(session: Session, window: str, *, pair_reserve_s: float | None = None) -> GateOutcome:
    """The plan's stage estimates against its limits (a measured pair reserve decides when given)."""
    from ..gates import BudgetGate, run_gate

    book, signer = session.ledger_and_signer()
    registered(book, window)
    if pair_reserve_s is not None and (pair_reserve_s < 0 or pair_reserve_s != pair_reserve_s):
        raise FormatError("--pair-reserve-s must be a non-negative number of seconds")
    return run_gate(book, signer, window, BudgetGate(pair_reserve_s=pair_reserve_s))


def record_standard_spec(session: Session, window: str, *, start: str, config: str) -> GateOutcome:
    """The start's speculative config (JSON or ``@FILE``) is standard verification (and its arm's declared one)."""
    from ..gates import StandardSpecGate, run_gate

    book, signer = session.ledger_and_signer()
    registered(book, window)
    value = read_json_arg(config, "config")
    if not isinstance(value, dict):
        raise FormatError("config must be a JSON object")
    return run_gate(book, signer, window, StandardSpecGate(start, value))


def record_power(session: Session, window: str, *, pilot: Path | None = None) -> GateOutcome:
    """The plan's [power] on the archive, or on a pilot file (kept as a blob); FAILs closed on a thin archive."""
    from ..gates import PowerGate, run_gate

    book, signer = session.ledger_and_signer()
    registered(book, window)
    data = None if pilot is None else read_bounded(pilot, "--pilot")
    return run_gate(book, signer, window, PowerGate(data))


def check_power_gate(session: Session, window: str, *, pilot: Path | None = None) -> Finding:
    """What ``record_power`` would record, appending nothing (``tally gate power --check``): a check, not a
    gate result, so that a trial of a thin archive leaves no FAIL in the window's record."""
    from ..gates import PowerGate
    from ..plan import registered_plan

    book = session.ledger()
    plan = registered_plan(book, window).plan
    data = None if pilot is None else read_bounded(pilot, "--pilot")
    return PowerGate(data).check(book, plan)


@dataclass(frozen=True)
class RehearsalRun:
    """A rehearsal, the files it wrote, and its gate result when it was recorded for a window."""

    result: Rehearsal
    summary_path: Path
    responses_path: Path
    record: GateRecord | None
    planned: bool                  # a window's plan said which fields are needed

    @property
    def vllm_probes(self) -> tuple[str, ...]:
        """The fixed probes that are vLLM checks (they decide only with the vLLM checks on)."""
        from ..rehearsal import VLLM_PROBES

        return tuple(VLLM_PROBES)


def rehearse_production(session: Session, url: str, eos: int, out: Path, *, window: str | None = None,
                        model: str | None = None, timeout: float = 30.0, vllm_checks: bool = True,
                        accept_ignored: tuple[str, ...] = (), probes_file: Path | None = None) -> RehearsalRun:
    """Rehearse the admission's API probes and the capability probe against production, write
    ``rehearsal.json`` and ``responses.jsonl`` into ``out`` and, with ``window``, record the rehearsal gate.

    Every input is checked before the first probe is sent; credentials in ``url`` are sent as an
    Authorization header and never recorded.
    """
    from ..gates import RehearsalGate, run_gate
    from ..measure import OriginAuth, redact, server_url
    from ..rehearsal import FIELDS, plan_needs, rehearse, write_rehearsal

    if not url.startswith(("http://", "https://")):
        raise FormatError(f"--url {redact(url)!r} must start with http:// or https://")
    server = server_url(url.rstrip("/"), "--url")
    if eos < 0:
        raise FormatError("--eos must be a token id (>= 0)")
    if not timeout > 0:
        raise FormatError("--timeout must be positive")
    accepted = tuple(dict.fromkeys(accept_ignored))
    for name in accepted:
        if name not in FIELDS:
            raise FormatError(f"--accept-ignored {name[:100]!r} is not a probed field (fields: {', '.join(FIELDS)})")
    probe_list = _probe_list(probes_file, model) if probes_file is not None else None
    check_out(out, "rehearsal.json", "responses.jsonl")  # refuse planted symlinks before any probe
    book = reg = signer = None
    if window is not None:
        book, signer = session.ledger_and_signer()
        reg = registered(book, window)
    result = rehearse(server.url, eos, model=model, timeout=timeout, auth=OriginAuth(server),
                      needs=plan_needs(reg.plan) if reg is not None else (), vllm_checks=vllm_checks,
                      accept_ignored=accepted, probe_list=probe_list)
    summary_path, responses_path, responses = write_rehearsal(result, out)
    record = None
    if book is not None and reg is not None and signer is not None:
        record = run_gate(book, signer, reg.window, RehearsalGate(result, responses)).record
    return RehearsalRun(result, summary_path, responses_path, record, reg is not None)


def _probe_list(path: Path, model: str | None) -> ProbeList:
    """The --probes file, read as hostile input: a regular file, bounded, every line validated."""
    from ..rehearsal import MAX_PROBE_LIST_BYTES, RESERVED_NAMES, read_probe_list

    data = read_bounded(path, "--probes", limit=MAX_PROBE_LIST_BYTES)
    return read_probe_list(data, f"--probes {path}", reserved=RESERVED_NAMES, model=model)


def record_chain_prev_ok(session: Session, window: str, site: Path | None = None) -> PrevOkRecord:
    """The previous window left a consistent chain: from replayed state and, with a site, from the hosts
    themselves (``preflight``, and ``placeholder_proof`` under the marker); a refusal aborts the chain."""
    from ..gates import run_prev_ok

    book, signer = session.ledger_and_signer()
    registered(book, window)
    driver = site_driver(site)[0] if site is not None else None
    try:
        return run_prev_ok(book, signer, window, driver)
    finally:
        if driver is not None:
            driver.close()


def check_chain_prev_ok(session: Session, window: str, site: Path | None = None) -> PrevOk:
    """What ``record_chain_prev_ok`` would find, appending nothing (no gate result, no chain abort):
    ``tally chain prev-ok --check``."""
    from ..gates import ChainPrevOkGate
    from ..plan import registered_plan
    from ..state import replay

    book = session.ledger()
    plan = registered_plan(book, window).plan
    driver = site_driver(site)[0] if site is not None else None
    try:
        return ChainPrevOkGate(driver).prev_ok(replay(book), plan)
    finally:
        if driver is not None:
            driver.close()


def chain_preflight_report(session: Session, site: Path, window: str | None = None) -> dict[str, Any]:
    """Serving state, HOLD and (only while the marker is present) placeholders, from the hosts; appends nothing."""
    from ..execution import chain_preflight

    driver, _ = site_driver(site)
    report = chain_preflight(session.ledger(), driver, window)
    driver.close()
    return report
