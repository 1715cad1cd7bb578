"""Windows: register a plan, admit, run (resume, abort), dry-run, report and the power a design has.

::

    from runner.app import Session, admit_window, register_window, run_window

    session = Session(db="tally.db")
    register_window(session, Path("plan.toml"))["plan_sha256"]
    admit_window(session, "w1").seq                       # PolicyError naming what is missing
    run_window(session, "w1", Path("site.toml")).ending   # under the window's runner lock

A window is admitted automatically when the last gate its plan requires passes; running it
holds the window's runner lock for as long as it runs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import FormatError

from .files import read_json_file
from .outdir import restage, staged_out
from .session import registered, site_driver

if TYPE_CHECKING:
    from collections.abc import Callable

    from ledger.store import Ledger

    from ..execution import RunResult
    from ..gates import Admission, PowerCheck
    from .session import Session

__all__ = ["Decision", "admit_window", "describe_power", "dry_run_window", "owner_name", "power_spread_lines",
           "recorded_decision", "register_window", "run_window", "window_power", "write_window_report"]


def register_window(session: Session, plan: Path, *, commit: str | None = None, window_id: str | None = None,
                    dry_run: bool = False) -> dict[str, Any]:
    """Validate a plan (``commit`` and ``window_id`` set first when given) and, unless ``dry_run``, append
    ``window.registered``; the window, its plan digest and where it was registered."""
    from ..plan import read_plan_file, register_plan

    overrides = {k: v for k, v in (("commit", commit), ("window_id", window_id)) if v is not None}
    loaded = read_plan_file(plan, overrides=overrides)
    result: dict[str, Any] = {"window": loaded.plan.window_id, "plan_sha256": loaded.plan.sha256,
                              "protocol": loaded.plan.protocol, "mode": loaded.plan.mode, "seq": None,
                              "already": False}
    if not dry_run:
        book, signer = session.ledger_and_signer()
        reg = register_plan(book, signer, loaded)
        result.update(seq=reg.seq, already=reg.already)
    return result


def admit_window(session: Session, window: str) -> Admission:
    """Append ``window.admitted`` if every required gate has a PASS at the plan's commit."""
    from ..gates import admit

    book, signer = session.ledger_and_signer()
    registered(book, window)
    return admit(book, signer, window)


def run_window(session: Session, window: str, site: Path, *, resume: bool = False, abort: bool = False,
               chain_production: Path | None = None, progress: bool = False, echo: bool = True,
               verbose: bool = False, wait_hosts_s: float = 0.0,
               guard: Callable[[Callable[..., None]], Callable[..., None]] = lambda show: show) -> RunResult:
    """Execute (``resume``: continue, ``abort``: restore production and decide REJECT) a registered window on a
    site, under its runner lock and a lock on each of the site's hosts (``wait_hosts_s``: how long to wait for
    another runner's; then ``ExternalError``, exit 3). ``progress``: the terminal's progress bar; ``echo``: the
    runner's lines (each distinct one once; ``verbose``: every one);
    ``guard`` wraps every output callback (the CLI's makes a failed print harmless, so that a closed pipe
    mid-HOLD never stops the window before its recorded end)."""
    from ..execution import Progress, WindowRunner, host_locks, refuse_unadmitted, window_lock
    from ..state import replay

    book = session.ledger()
    signer = session.signer(book.url)
    registered(book, window)  # an unknown window is refused before the site is read or touched
    state = replay(book)
    if not abort:
        refuse_unadmitted(state, window)   # before the site is read: a server that is down must not hide it
    driver, scale = site_driver(site)
    decided = state.windows[window].decision is not None   # nothing left to do on the hosts: none is waited for
    hosts = contextlib.nullcontext() if decided else host_locks(
        book, driver.hosts, holder=f"window {window} ({owner_name()})", wait_s=wait_hosts_s)
    with window_lock(book, window), hosts, Progress(enabled=progress, echo=echo, verbose=verbose) as bar:
        runner = WindowRunner(book, signer, window, driver, time_scale=scale,
                              say=guard(bar.say) if echo else (lambda _t: None),
                              on_wave=guard(bar.wave), owner=window, chain_production=chain_production,
                              state=state)   # the replay above, brought up to date (not a second full one)
        guard(bar.begin)(len(runner.plan.waves), runner.plan)
        if not resume and not abort and (runner.ws.actions or runner.ws.ending is not None):
            raise FormatError(f"window {window} has already run (phase {runner.ws.phase}); "
                              "use `tally window resume` to continue it")
        result = runner.run(resume=resume, abort=abort)
    driver.close()
    return result


def owner_name() -> str:
    """Who runs windows here (``user@host``), as the run's JSON names it."""
    from ..execution import owner_name as name

    return name()


def dry_run_window(session: Session, window: str, site: Path) -> dict[str, Any]:
    """The plan, gates and timeline a run would take on the site; touches nothing."""
    from ..execution import dry_run_report

    book = session.ledger()
    registered(book, window)  # an unknown window is refused before the site is read
    driver, scale = site_driver(site)
    return dry_run_report(book, window, driver, scale)


@dataclass(frozen=True)
class Decision:
    """A window's recorded decision: the rule input and the result (``decision.recorded``)."""

    input: dict[str, Any]
    result: dict[str, Any]


def recorded_decision(book: Ledger, window: str) -> Decision | None:
    """The window's recorded decision, if it has one."""
    for event in book.events(stream=f"window/{window}", types=["decision.recorded"]):
        from ..events import payloads, read_payload

        recorded = read_payload(event, payloads.DecisionRecorded)
        return Decision(recorded.input, recorded.result)
    return None


def write_window_report(session: Session, window: str, out: Path) -> dict[str, Any]:
    """Write the window's report (decision, reasons, plots) from its recorded decision; the paths written."""
    from ..report import window_report

    book = session.ledger()
    with staged_out(out) as stage:  # refuses a symlinked or non-directory --out first
        staged = window_report(book, window, stage)
    return {**staged, "html": restage(staged["html"], stage, out), "markdown": restage(staged["markdown"], stage, out),
            "figures": [restage(p, stage, out) for p in staged["figures"]]}


def window_power(session: Session, window: str, *, effect: float | None = None, spread_from: str = "archive",
                 pilot: Path | None = None, target: float | None = None, windows: int | None = None,
                 seed: int | None = None, twin: Path | None = None) -> PowerCheck:
    """What the registered rule and design can detect (the power gate's figures); appends nothing.

    ``spread_from="twin"`` simulates the pilot on a calibrated twin (``twin``, ``runner.app.twin``); the
    evidence then carries ``noise_source``, the line saying so."""
    from ..gates import check_power

    if spread_from not in ("archive", "pilot", "twin"):
        raise FormatError(f"--spread-from must be archive, pilot or twin, got {spread_from[:40]!r}")
    if (spread_from == "pilot") != (pilot is not None):
        raise FormatError("--spread-from pilot needs --pilot FILE (and --pilot needs --spread-from pilot)")
    if (spread_from == "twin") != (twin is not None):
        raise FormatError("--spread-from twin needs --twin TWIN.toml (and --twin needs --spread-from twin)")
    if effect is not None and not 0 <= effect < 1:
        raise FormatError("--effect must be in [0, 1)")
    if target is not None and not 0 < target < 1:
        raise FormatError("--target must be in (0, 1)")
    if windows is not None and not 100 <= windows <= 1_000_000:
        raise FormatError("--windows must be in 100..1000000")
    if seed is not None and not 0 <= seed < 2**53:
        raise FormatError("--seed must be in 0..2^53-1")
    book = session.ledger()
    reg = registered(book, window)
    document = None if pilot is None else read_json_file(pilot, "--pilot", name=f"pilot file {pilot}")
    source = None
    if twin is not None:
        from .twin import twin_pilot

        document, source = twin_pilot(twin, reg.plan)
    result = check_power(book, reg.plan, effect=effect, target=target, windows=windows, seed=seed, pilot=document,
                         until=book.size())
    if source is not None:
        result.evidence["noise_source"] = source
    return result


def describe_power(figures: dict[str, Any]) -> str:
    """One line for power figures: the power at the effect, the MDE, what is needed, what it rests on."""
    from ..gates import describe

    return describe(figures)


def power_spread_lines(figures: dict[str, Any]) -> list[str]:
    """The spreads power figures rest on, one line each (start-to-start, repeat-to-repeat, their source)."""
    from ..decide import spread_lines

    return spread_lines(figures)
