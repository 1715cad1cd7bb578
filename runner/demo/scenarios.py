"""``tally demo``: a simulated window end to end, in one process tree, with no setup.

Starts the simulator on a free loopback port, makes a fresh ledger in the demo
directory, registers one of the example plans against the synthetic families, passes
its gates (qualification and RNG against a small git repository and receipts the demo
makes, the budget, the API rehearsal against the simulator), executes it with progress,
restores, decides, writes the report, then verifies and audits the ledger, and says
where everything is.

Scenarios: ``window`` (seed 000's production-policy window), ``chain`` (two chained
windows, then a restoring one), ``pp3`` (seed 003's ABBA window), ``faults`` (a stall, a
5xx burst and a thermal dial-back: the verdict turns INCONCLUSIVE with reasons), ``power``
(a plan requiring power for a +3.5 % effect: its power gate refuses three repeats, and a
plan with the repeats the gate names passes; neither is executed), ``looks`` (a promotion
budget registered, a candidate with no effect measured in three chained windows and one with
a real effect once; the promotion gate refuses the best no-effect window, its looks counted,
and promotes the other: ``runner.demo.looks``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.keys import Signer, generate_key_file
from ledger.store import Ledger

from .pair import sim_config_for

if TYPE_CHECKING:
    from ..vocabulary import CounterSourceName
    from .pair import PlanDemo

__all__ = ["DEMO_TIME_SCALE", "DemoWindow", "World", "build_world", "pass_chain_gate", "pass_gates", "result_lines",
           "run_demo", "sim_config_for"]

DATA = Path(__file__).resolve().parent / "data"
"""The example plans and families the scenarios run, shipped inside the package (so an installed ``tally demo``
has them): byte-for-byte copies of ``examples/`` (the source; ``tests/test_packaging.py`` fails if they drift)."""
DATA_FILES = ("seed000-production-policy.toml", "seed000-controlled.toml", "seed003-abba.toml", "families",
              "promotion/pp4-promote-gate-v2.toml")
DEMO_TIME_SCALE = 0.02


@dataclass(frozen=True)
class DemoWindow:
    plan_file: str
    window_id: str
    overrides: Mapping[str, Any]
    edit: Callable[[str], str] | None = None  # a change to the plan's TOML text (tests)
    source: Path | None = None  # an operator's plan file, read where it is (`tally demo --plan`)


# --------------------------------------------------------------------------- the world the gates look at


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "tally demo", "GIT_AUTHOR_EMAIL": "demo@tally.invalid",
           "GIT_COMMITTER_NAME": "tally demo", "GIT_COMMITTER_EMAIL": "demo@tally.invalid",
           "GIT_AUTHOR_DATE": "2026-11-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-11-01T00:00:00Z",
           "HOME": str(repo), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    done = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def make_repository(root: Path, plans: Sequence[Any]) -> tuple[Path, str, str]:
    """A git repository with the plans' carried files: commit Q (qualified), then HEAD.

    HEAD changes only files that are not carried, plus a comment inside a carried unit,
    so the qualification carry holds (AST-identical units, byte-identical files).
    """
    repo = root / "repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    for plan in plans:
        carry = plan.qualification
        for path in carry.files:
            target = repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f"# carried file {path}\nVALUE = 1\n")
        for prefix in carry.prefixes:
            target = repo / prefix / "module.py"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("def kernel(x):\n    return x * 2\n")
        for unit in carry.units:
            path, _, name = unit.partition(":")
            target = repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            existing = target.read_text() if target.exists() else ""
            parts = name.split(".")
            if len(parts) == 2:
                code = f"class {parts[0]}:\n    def {parts[1]}(self):\n        return 'run'\n"
            else:
                code = f"def {parts[0]}():\n    return 'prepared'\n"
            if f"def {parts[-1]}" not in existing:
                target.write_text(existing + code)
    (repo / "README.md").write_text("demo experiment repository\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "qualified")
    qualified = _git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("demo experiment repository\nmeasurement layer changed after admission\n")
    (repo / "notes.txt").write_text("not carried\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "measurement layer")
    head = _git(repo, "rev-parse", "HEAD")
    return repo, qualified, head


def write_receipts(root: Path, qualified: str, head: str, tests: Sequence[str] = ()) -> tuple[Path, Path]:
    """An admission receipt at Q and an RNG receipt at HEAD listing ``tests`` (the plans' RNG test set) passed."""
    kernel = "5e" * 32
    admission = root / "admission-receipt.json"
    admission.write_text(json.dumps({"_type": "tally.admission-receipt/v1", "verdict": "QUALIFIED",
                                     "commit": qualified, "prepared_verifier_sha256": kernel,
                                     "window": "demo-admission", "issued_at": "2026-11-01T00:00:00.000000Z",
                                     "evidence": {"note": "made by tally demo"}}, indent=2))
    rng = root / "rng-receipt.json"
    rng.write_text(json.dumps({"_type": "tally.rng-receipt/v1", "verdict": "PASS", "commit": head,
                               "kernel_sha256": kernel,
                               "tests": [{"name": name, "outcome": "passed"}
                                         for name in tests or ("aud1_61161_1", "pp4_sampled_q_multiround_1")],
                               "generated_at": "2026-11-01T00:00:00.000000Z"}, indent=2))
    return admission, rng


# --------------------------------------------------------------------------- gates


def pass_gates(book: Ledger, signer: Signer, window: str, *, repo: Path, qualified: str, admission: Path,
               rng: Path, sim_url: str, out: Path, say: Callable[[str], None]) -> None:
    """Run every gate the plan requires, as `tally gate ...` and `tally rehearse` would."""
    from ..gates import BudgetGate, Gate, QualificationGate, RehearsalGate, RngGate, run_gate
    from ..plan import registered_plan
    from ..rehearsal import plan_needs, rehearse, write_rehearsal

    plan = registered_plan(book, window).plan
    for name in plan.required_gates:
        gate: Gate
        if name == "qualification":
            gate = QualificationGate(repo=repo, qualified_commit=qualified, admission=admission)
        elif name == "rng":
            gate = RngGate(receipt=rng, admission=admission)
        elif name == "budget":  # the demo's measured pair reserve (seed 000), when the plan has one
            gate = BudgetGate(pair_reserve_s=333.0 if plan.budget.pair_reserve_s is not None else None)
        elif name == "rehearsal":
            rehearsal = rehearse(sim_url, 1, timeout=30.0, needs=plan_needs(plan))
            _, _, responses = write_rehearsal(rehearsal, out / f"rehearsal-{window}")
            gate = RehearsalGate(rehearsal, responses)
        else:
            continue
        outcome = run_gate(book, signer, window, gate)
        say(f"  gate {name}: {outcome.verdict} ({outcome.summary})")


def pass_chain_gate(book: Ledger, signer: Signer, window: str, say: Callable[[str], None]) -> None:
    """Under another window's marker: the previous window must have left a consistent chain."""
    from ..gates.chain import run_prev_ok
    from ..state.replay import replay

    state = replay(book)
    if state.marker is not None and state.marker.window != window:
        record = run_prev_ok(book, signer, window)
        say(f"  gate chain_prev_ok: {record.result.verdict} ({record.result.summary})")


# --------------------------------------------------------------------------- scenarios


POWER_EFFECT = 0.035
POWER_PILOT = {"spread": {"start_sd": 0.003, "repeat_sd": 0.012, "windows": 4, "guards": {
    "accepted_per_round": {"start_sd": 0.0, "repeat_sd": 0.0}, "decode_tps": {"start_sd": 0.003, "repeat_sd": 0.012}}},
    "correlation": {"cells": 0.5, "decode_tps": 0.95, "cells_decode_tps": 0.5}}
"""The power scenario's pilot: the spread of earlier control pairs on the pair (an example): greedy drafts accept
the same tokens in every start, the client decode rate moves with the server rate, a start's offset half shared."""


def _power_overrides(repeats: int) -> dict[str, Any]:
    return {"chain": "none", "power": {"effect": POWER_EFFECT, "min_power": 0.8, "min_windows": 1},
            "gates": {"required": ["qualification", "rng", "budget", "rehearsal", "power"]},
            "measurement": {"repeats": repeats, "order": "cell-major", "request_deadline_s": 120.0,
                            "wave_deadline_s": 900.0}}


SCENARIO_SIM: Mapping[str, Mapping[str, Any]] = {"pp3": {"eos_probability": 0.0}}
"""A scenario's simulated server, where it differs: in ``pp3`` no spontaneous EOS, so every decode run
reaches its 30 s bound (the plan keeps ``ignore_eos = false``; the smoke stage's EOS probe forces EOS)."""


def _windows(scenario: str) -> list[DemoWindow]:
    if scenario == "looks":
        from .looks import looks_windows

        return looks_windows(DemoWindow)
    if scenario == "power":
        return [DemoWindow("seed000-production-policy.toml", "power-3-repeats", _power_overrides(3))]
    if scenario == "pp3":
        return [DemoWindow("seed003-abba.toml", "pp3-abba", {})]
    if scenario == "chain":
        return [
            DemoWindow("seed000-production-policy.toml", "chain-1-production-policy", {"chain": "chained"}),
            DemoWindow("seed000-controlled.toml", "chain-2-controlled", {"chain": "chained"}),
            DemoWindow("seed000-controlled.toml", "chain-3-controlled-last", {"chain": "last"}),
        ]
    if scenario == "faults":
        return [DemoWindow("seed000-production-policy.toml", "faults-production-policy", {"chain": "none"})]
    return [DemoWindow("seed000-production-policy.toml", "pp4-win2-production-policy", {"chain": "none"})]


def _fault_injector(sim: Any, say: Callable[[str], None]) -> Callable[[int, int, str], None]:
    """In the faults scenario: a stall, a 5xx burst and a thermal dial-back during s2's waves."""
    done: set[str] = set()

    def on_wave(count: int, _total: int, label: str) -> None:
        if label.startswith("s2 ") and "stall" not in done:
            done.add("stall")
            sim.set_faults(stall={"after_chunks": 20, "seconds": 30.0, "count": 1})
            say("  fault: the next stream stalls mid-way (cut by the request deadline)")
        elif label.startswith("s2 ") and count >= 16 and "5xx" not in done:
            done.add("5xx")
            sim.set_faults(http_5xx={"count": 2, "status": 503})
            say("  fault: a 5xx burst (2 requests)")
        elif label.startswith("s3 ") and "thermal" not in done:
            done.add("thermal")
            sim.control("thermal", cap_mhz=2000)
            say("  fault: THERMAL-WATCH dials the clock back inside the HOLD")

    return on_wave


@dataclass
class World:
    """Everything a demo (or an end-to-end test) runs windows in."""

    directory: Path
    book: Ledger
    root: Signer
    repo: Path
    qualified: str
    head: str
    admission: Path
    rng: Path
    sim: Any
    driver: Any
    time_scale: float
    plans: list[Any]


def _plan_file(directory: Path, window: DemoWindow) -> Path:
    """The example plan copied into the demo directory (edited if the window says so); an operator's own plan
    is read where it is (its family files beside it)."""
    if window.source is not None:
        return window.source
    target = directory / "plans"
    if not (target / "families").exists():
        shutil.copytree(DATA / "families", target / "families")
    text = (DATA / window.plan_file).read_text()
    if window.edit is not None:
        text = window.edit(text)
    path = target / f"{window.window_id}.toml"
    path.write_text(text)
    return path


def build_world(directory: Path, windows: Sequence[DemoWindow], *, time_scale: float = DEMO_TIME_SCALE,
                origin: str = "tally.demo/window", sim_config: Mapping[str, Any] | None = None,
                clocks: bool = True, counter_source: CounterSourceName = "vllm", db_url: str | None = None) -> World:
    """Plans, a git repository and receipts for the gates, a fresh ledger, a running simulator.

    ``clocks`` and ``counter_source`` describe the simulated site (GPU clocks or none; where
    its counters come from), as a site file would; ``db_url`` an empty database for the ledger
    (default: ``tally.db`` in ``directory``)."""
    from ..drivers.sim import SimDriver
    from ..plan.parse import read_plan_file
    from ..sim import start as start_sim
    from ..sim.config import config_from_dict

    directory.mkdir(parents=True, exist_ok=True)
    files = [(_plan_file(directory, w), w) for w in windows]
    first = [read_plan_file(path, overrides={"window_id": w.window_id, **w.overrides}).plan for path, w in files]
    repo, qualified, head = make_repository(directory, first)
    tests = dict.fromkeys(name for plan in first for name in plan.rng_tests)
    admission, rng = write_receipts(directory, qualified, head, tuple(tests))
    loaded = [read_plan_file(path, overrides={"window_id": w.window_id, "commit": head, **w.overrides})
              for path, w in files]
    config = dict(sim_config_for([item.plan for item in loaded], time_scale=time_scale))
    config.update(sim_config or {})
    root = generate_key_file(directory / ".tally" / "root.pem", "root")
    book = Ledger(db_url or f"sqlite:///{directory / 'tally.db'}")
    book.init(origin, root)
    checked = config_from_dict(config)
    sim = start_sim(checked, port=0)
    site = f'kind = "sim"\nurl = "{sim.url}"\n' + ("" if clocks else "clocks = false\n")
    if counter_source != "vllm":
        site += f'\n[endpoints]\ncounter_source = "{counter_source}"\n'
    (directory / "site.toml").write_text(site)
    cap = int(checked.arm(checked.production_arm).clock_cap_mhz)
    driver = SimDriver(sim.url, hosts=tuple(checked.hosts), production_clock_cap_mhz=cap, clocks=clocks,
                       counter_source=counter_source)
    return World(directory, book, root, repo, qualified, head, admission, rng, sim, driver, time_scale, loaded)


def run_demo(directory: Path, scenario: str = "window", *, quiet: bool = False,
             say: Callable[[str], None] | None = None, time_scale: float = DEMO_TIME_SCALE,
             plan: PlanDemo | None = None,
             on_wave: Callable[[int, int, str], None] | None = None) -> dict[str, Any]:
    """Run a scenario in ``directory`` (created); returns a summary with ``ok``.

    ``say`` gets every line (default: printed unless ``quiet``); ``on_wave`` is called after each
    measured wave (done, total, label), for a progress display.

    With ``plan`` (``tally demo --plan``): the operator's own plan, on the simulated pair
    ``runner.demo.pair`` built from its arms, instead of a scenario.
    """
    import dataclasses

    from ledger.errors import TallyError

    from ..decide.inputs import replay_window
    from ..execution.window import WindowRunner
    from ..gates.admission import admit
    from ..plan.register import register_plan
    from ..report.window import window_report
    from ..state.fold import admission_blockers
    from ..state.replay import replay

    emit = say or ((lambda _t: None) if quiet else print)
    began = time.perf_counter()
    if plan is not None:
        scenario, time_scale = "plan", plan.time_scale
        world = build_world(directory, [DemoWindow(plan.path.name, plan.window_id, {}, source=plan.path)],
                            time_scale=time_scale, origin="tally.demo/plan", sim_config=plan.config,
                            clocks=plan.clocks, counter_source=plan.counter_source)
    else:
        world = build_world(directory, _windows(scenario), time_scale=time_scale, origin=f"tally.demo/{scenario}",
                            sim_config=SCENARIO_SIM.get(scenario))
    book, root = world.book, world.root
    emit(f"tally demo ({scenario if plan is None else plan.path}): ledger {directory / 'tally.db'}, simulator at "
         f"{world.sim.url} (hosts {', '.join(world.driver.hosts)}, time scale {time_scale})")
    summary: dict[str, Any] = {"scenario": scenario, "dir": str(directory), "db": str(directory / "tally.db"),
                               "windows": [], "ok": True}
    if plan is not None:
        summary["plan"] = str(plan.path)
        summary["pair"] = list(plan.notes)
        emit("\nstage pair: the simulated pair, built from the plan's arms")
        for note in plan.notes:
            emit(f"  {note}")
    try:
        registrations = []
        policy_file = None
        if scenario == "power":
            _power_scenario(world, summary, emit)
        if scenario == "looks":
            from .looks import register_budget

            policy_file = register_budget(world, emit)
        plans = world.plans if scenario != "power" else []
        if plans:
            emit("\nstage gates: register, then every gate the plan requires, before any host contact")
        for item in plans:  # every gate before any host contact (the rehearsal needs production up)
            reg = register_plan(book, root, item)
            registrations.append(reg)
            emit(f"\nregistered {reg.window} (plan {reg.plan_sha256[:16]}) at seq {reg.seq}")
            pass_gates(book, root, reg.window, repo=world.repo, qualified=world.qualified,
                       admission=world.admission, rng=world.rng, sim_url=world.sim.url, out=directory, say=emit)
        for reg in registrations:
            emit(f"\nwindow {reg.window}")
            pass_chain_gate(book, root, reg.window, emit)
            now = replay(book)
            blockers = admission_blockers(now, reg.window) if now.windows[reg.window].admitted_seq is None else []
            if blockers:
                emit(f"window {reg.window} is not admitted: {'; '.join(blockers)}")
                summary["windows"].append({"window": reg.window, "admitted": False, "blockers": blockers})
                summary["ok"] = False
                continue
            if now.windows[reg.window].admitted_seq is None:
                admit(book, root, reg.window)
            planned = _dry_run(book, reg.window, world.driver, time_scale, emit) if plan is not None else None
            emit(f"\nstage execute: window {reg.window} (preflight, snapshot, drain, HOLD, the starts and their waves)")
            waves = _on_waves(_fault_injector(world.sim, emit) if scenario == "faults" else None, on_wave)
            runner = WindowRunner(book, root, reg.window, world.driver, time_scale=time_scale, say=emit,
                                  on_wave=waves)
            try:
                result = runner.run()
            except TallyError as error:  # refused before any host action (the site does not fit), or stopped
                emit(f"window {reg.window}: {error}")
                summary["windows"].append({"window": reg.window, "admitted": True, "refused": str(error)})
                summary["ok"] = False
                continue
            ws = replay(book).windows[reg.window]
            restore = ws.restore
            emit(f"\nstage restore: window {reg.window} ended {ws.ending}"
                 + (f"; restore {restore.status} (attempt {restore.attempts}), watch "
                    f"{ws.watch.verdict if ws.watch else None}" if restore else "")
                 + ("; production left down under the chain marker" if ws.ending == "chained" else ""))
            emit(f"stage decide: {ws.protocol}: {result.decision}")
            replayed = replay_window(book, reg.window)
            emit(f"\nstage report: window {reg.window}")
            report = window_report(book, reg.window, directory / "reports" / reg.window)
            entry = dataclasses.asdict(result) | {"replay": "MATCH" if replayed.match else "MISMATCH",
                                                  "report": report["html"]}
            if planned is not None:
                entry["dry_run_matched"] = _executed(book, reg.window) == planned
                emit(f"the executed host actions {'equal' if entry['dry_run_matched'] else 'DIFFER FROM'} the "
                     "dry run's")
            summary["windows"].append(entry)
            emit(f"decision {result.decision}; replay verdict {entry['replay']}; report {report['html']}")
            if result.blocked or not replayed.match:
                summary["ok"] = False
        if policy_file is not None:
            from .looks import check_looks

            check_looks(world, policy_file, summary, emit)
        world.driver.close()
    finally:
        world.sim.stop()
    return _finish(world, summary, emit, began)


def _on_waves(*callbacks: Callable[[int, int, str], None] | None) -> Callable[[int, int, str], None] | None:
    """One wave callback calling each of ``callbacks`` given, in order."""
    given = [c for c in callbacks if c is not None]
    if not given:
        return None

    def on_wave(count: int, total: int, label: str) -> None:
        for callback in given:
            callback(count, total, label)

    return on_wave


def _power_scenario(world: World, summary: dict[str, Any], emit: Callable[[str], None]) -> None:
    """Register, gate (power from a pilot) and dry-run a 3-repeat plan, then the plan with the repeats it needs."""
    from ..execution.dryrun import dry_run_report
    from ..gates.power import power_gate
    from ..plan.parse import read_plan_file
    from ..plan.register import register_plan

    book, root = world.book, world.root
    pilot = json.dumps(POWER_PILOT, indent=1).encode()
    (world.directory / "pilot.json").write_bytes(pilot)
    path = world.directory / "plans" / "power-3-repeats.toml"
    repeats, loaded = 3, world.plans[0]
    for _ in range(2):
        reg = register_plan(book, root, loaded)
        emit(f"\nregistered {reg.window} ({repeats} repeats, [power] effect {POWER_EFFECT:+.1%}) at seq {reg.seq}")
        pass_gates(book, root, reg.window, repo=world.repo, qualified=world.qualified, admission=world.admission,
                   rng=world.rng, sim_url=world.sim.url, out=world.directory, say=emit)
        gate = power_gate(book, root, reg.window, pilot=pilot)
        emit(f"  gate power: {gate.summary}")
        for line in dry_run_report(book, reg.window, world.driver, world.time_scale)["lines"][2:7]:
            emit(f"  dry run | {line}")
        summary["windows"].append({"window": reg.window, "repeats": repeats, "power": gate.verdict,
                                   "figures": gate.evidence.get("figures"),
                                   "admitted": gate.record.admitted is not None})
        needed = (gate.evidence.get("figures") or {}).get("needed", {}).get("repeats")
        if gate.verdict == "PASS" or needed is None:
            break
        repeats = int(needed)
        emit(f"  the gate names {repeats} repeats: register the plan again with them")
        loaded = read_plan_file(path, overrides={"window_id": f"power-{repeats}-repeats", "commit": world.head,
                                                 **_power_overrides(repeats)})
    verdicts = [w["power"] for w in summary["windows"]]
    summary["ok"] = verdicts == ["FAIL", "PASS"] and bool(summary["windows"][-1]["admitted"])


def _finish(world: World, summary: dict[str, Any], emit: Callable[[str], None], began: float) -> dict[str, Any]:
    """Checkpoint, verify, audit the ledger and its bundle; say where everything is."""
    from ledger.bundle import export_bundle

    from ..audit.full import run_audit

    book, root, directory = world.book, world.root, world.directory
    from ledger.signing import sign_checkpoint
    from ledger.stored import verify_ledger

    checkpoint = sign_checkpoint(book, root)
    (directory / "checkpoint.txt").write_text(checkpoint.note)
    emit("\nstage verify: every event's hash, signature and chain; the checkpoint")
    verified = verify_ledger(book)
    summary["verify"] = {"ok": True, "events": verified.verified.size}
    emit(verified.summary())
    emit("\nstage audit: the protocol invariants, in the database and in the exported bundle")
    audit = run_audit(book=book)
    summary["audit"] = audit.to_json()
    summary["ok"] = summary["ok"] and audit.ok
    bundle = directory / "bundle"
    export_bundle(book, bundle, signer=root)
    bundle_audit = run_audit(bundle=bundle, root_key=root.id)
    summary["bundle_audit"] = bundle_audit.ok
    summary["ok"] = summary["ok"] and bundle_audit.ok
    summary["seconds"] = round(time.perf_counter() - began, 1)
    for line in audit.lines():
        emit(line)
    emit(f"bundle {bundle}: offline audit {'PASS' if bundle_audit.ok else 'FAIL'}")
    emit(f"\nEverything is in {directory}/: tally.db (the ledger; try `tally --db {directory}/tally.db replay state`), "
         f"reports/ (report.html per window), bundle/ (audit it with `tally audit {bundle}`), "
         f"{'' if 'plan' in summary else 'plans/, '}repo/ and the receipts the gates read. {summary['seconds']} s.")
    book.close()
    return summary


def _dry_run(book: Ledger, window: str, driver: Any, time_scale: float,
             emit: Callable[[str], None]) -> list[tuple[str, str]]:
    """``tally window run --dry-run``'s steps, printed; returns its host actions (action, host)."""
    from ..execution.dryrun import dry_run_report

    dry = dry_run_report(book, window, driver, time_scale)
    emit(f"\nstage dry run: window {window}: {len(dry['actions'])} steps, {len(dry['host_actions'])} host actions "
         "(`tally window run --dry-run`)")
    for reason in dry["refusals"]:
        emit(f"REFUSED: {reason}")
    for number, action in enumerate(dry["actions"], 1):
        emit(f"  {number:>3}. {action}")
    return [(a["action"], a["host"]) for a in dry["host_actions"]]


def _executed(book: Ledger, window: str) -> list[tuple[str, str]]:
    """The window's host actions as recorded (``host.action`` started), in order."""
    from ..events import payloads, read_payload

    actions = [read_payload(e, payloads.HostAction)
               for e in book.events(stream=f"window/{window}", types=["host.action"])]
    return [(a.action, a.host) for a in actions if a.phase == "started"]


def result_lines(summary: Mapping[str, Any]) -> list[str]:
    """The closing lines of a demo: per window its verdict and replay, then verify, audit and the reports."""
    lines = []
    for entry in summary["windows"]:
        if "decision" not in entry:
            why = "; ".join(entry.get("blockers") or []) or entry.get("refused") or "?"
            lines.append(f"window {entry['window']}: NOT RUN ({why})")
            continue
        lines.append(f"window {entry['window']}: ending {entry['ending']}, verdict {entry['decision']}, "
                     f"replay {entry['replay']}, report {entry['report']}")
    verify = summary.get("verify") or {}
    audit = summary.get("audit") or {}
    lines.append(f"verify {'OK' if verify.get('ok') else 'FAILED'} ({verify.get('events')} events); "
                 f"audit {'PASS' if audit.get('ok') else 'FAIL'}; bundle audit "
                 f"{'PASS' if summary.get('bundle_audit') else 'FAIL'}; everything in {summary['dir']}/")
    return lines
