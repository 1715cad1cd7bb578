"""``tally demo``: a simulated window end to end, in one process tree, with no setup.

Starts the simulator on a free loopback port, makes a fresh ledger in the demo
directory, registers one of the example plans against the synthetic families, passes
its gates (qualification and RNG against a small git repository and receipts the demo
makes, the budget, the API rehearsal against the simulator), executes it with progress,
restores, decides, writes the report, then verifies and audits the ledger, and says
where everything is.

Scenarios: ``window`` (seed 000's production-policy window), ``chain`` (two chained
windows, then a restoring one), ``pp3`` (seed 003's ABBA window), ``faults`` (a stall, a
5xx burst and a thermal dial-back: the verdict turns INCONCLUSIVE with reasons).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.keys import Signer, generate_key_file
from ledger.store import Ledger

__all__ = ["DEMO_TIME_SCALE", "DemoWindow", "World", "build_world", "pass_chain_gate", "pass_gates", "run_demo",
           "sim_config_for"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO_TIME_SCALE = 0.02
HOSTS = ("sim-head", "sim-worker")

# Plan arm `sim` tables use the plan's names; the simulator's config uses its own.
_SIM_NAMES = {"draft_depth": "k", "accept_per_pos": "acceptance", "step_base_ms": "step_base_ms",
              "step_per_token_ms": "step_per_token_ms", "ttft_base_ms": "ttft_base_ms",
              "ttft_per_1k_prompt_ms": "ttft_per_1k_tokens_ms", "clock_cap_mhz": "clock_cap_mhz"}


@dataclass(frozen=True)
class DemoWindow:
    plan_file: str
    window_id: str
    overrides: Mapping[str, Any]
    edit: Callable[[str], str] | None = None  # a change to the plan's TOML text (tests)


def sim_config_for(plans: Sequence[Any], *, time_scale: float, seed: int = 7) -> dict[str, Any]:
    """A simulator config whose arms are the plans' arms (named as the plans name them)."""
    arms: dict[str, dict[str, Any]] = {}
    production: dict[str, Any] | None = None
    fallback: dict[str, Any] | None = None
    for plan in plans:
        for arm in plan.arms:
            table = {_SIM_NAMES[k]: v for k, v in arm.sim.items() if k in _SIM_NAMES}
            if plan.production_clock_cap_mhz is not None:
                table.setdefault("clock_cap_mhz", plan.production_clock_cap_mhz)
            if arm.speculative is not None:
                table["reported_config"] = dict(arm.speculative)
            table["reported_digest"] = arm.config_digest
            if arm.identities:
                table["reported_identities"] = dict(arm.identities)
            table["image"] = f"sim/{arm.name}@{arm.config_digest[:12]}"
            arms[arm.name] = table
            # Production serves with speculative decoding: the plan's P arm, else a speculative A.
            if production is None and arm.role in ("P", "A") and arm.speculates:
                production = dict(table, image=f"sim/production@{arm.config_digest[:12]}")
            elif fallback is None and arm.speculates:
                fallback = dict(table, image=f"sim/production@{arm.config_digest[:12]}")
    arms["production"] = production or fallback or next(iter(arms.values()))
    return {"model": "sim/deepseek-spec-demo", "seed": seed, "time_scale": time_scale, "hosts": list(HOSTS),
            "production_arm": "production", "start_s": 5.0, "eos_token_id": 1, "arms": arms}


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


def write_receipts(root: Path, qualified: str, head: str) -> tuple[Path, Path]:
    kernel = "5e" * 32
    admission = root / "admission-receipt.json"
    admission.write_text(json.dumps({"_type": "tally.admission-receipt/v1", "verdict": "QUALIFIED",
                                     "commit": qualified, "prepared_verifier_sha256": kernel,
                                     "window": "demo-admission", "issued_at": "2026-11-01T00:00:00.000000Z",
                                     "evidence": {"note": "made by tally demo"}}, indent=2))
    rng = root / "rng-receipt.json"
    rng.write_text(json.dumps({"_type": "tally.rng-receipt/v1", "verdict": "PASS", "commit": head,
                               "kernel_sha256": kernel,
                               "tests": [{"name": "aud1_61161_rejection_law", "outcome": "passed"},
                                         {"name": "pp4_sampled_q_multiround_4", "outcome": "passed"}],
                               "generated_at": "2026-11-01T00:00:00.000000Z"}, indent=2))
    return admission, rng


# --------------------------------------------------------------------------- gates


def pass_gates(book: Ledger, signer: Signer, window: str, *, repo: Path, qualified: str, admission: Path,
               rng: Path, sim_url: str, out: Path, say: Callable[[str], None]) -> None:
    """Run every gate the plan requires, as `tally gate ...` and `tally rehearse` would."""
    from ..gates.capability import plan_needs
    from ..gates.record import budget_gate, qualification_gate, rehearsal_gate, rng_gate
    from ..gates.rehearsal import rehearse, write_rehearsal
    from ..plan.register import registered_plan

    plan = registered_plan(book, window).plan
    for gate in plan.required_gates:
        if gate == "qualification":
            outcome = qualification_gate(book, signer, window, repo=repo, qualified_commit=qualified,
                                         admission=admission)
        elif gate == "rng":
            outcome = rng_gate(book, signer, window, receipt=rng, admission=admission)
        elif gate == "budget":  # the demo's measured pair reserve (seed 000), when the plan has one
            reserve = 333.0 if plan.budget.pair_reserve_s is not None else None
            outcome = budget_gate(book, signer, window, pair_reserve_s=reserve)
        elif gate == "rehearsal":
            rehearsal = rehearse(sim_url, 1, timeout=30.0, needs=plan_needs(plan))
            _, _, responses = write_rehearsal(rehearsal, out / f"rehearsal-{window}")
            outcome = rehearsal_gate(book, signer, window, rehearsal, responses)
        else:
            continue
        say(f"  gate {gate}: {outcome.verdict} ({outcome.summary})")


def pass_chain_gate(book: Ledger, signer: Signer, window: str, say: Callable[[str], None]) -> None:
    """Under another window's marker: the previous window must have left a consistent chain."""
    from ..gates.chain import run_prev_ok
    from ..state.replay import replay

    state = replay(book)
    if state.marker is not None and state.marker.get("window") != window:
        record = run_prev_ok(book, signer, window)
        say(f"  gate chain_prev_ok: {record.result.verdict} ({record.result.summary})")


# --------------------------------------------------------------------------- scenarios


def _windows(scenario: str) -> list[DemoWindow]:
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
    """The example plan copied into the demo directory (edited if the window says so)."""
    target = directory / "plans"
    if not (target / "families").exists():
        shutil.copytree(EXAMPLES / "families", target / "families")
    text = (EXAMPLES / window.plan_file).read_text()
    if window.edit is not None:
        text = window.edit(text)
    path = target / f"{window.window_id}.toml"
    path.write_text(text)
    return path


def build_world(directory: Path, windows: Sequence[DemoWindow], *, time_scale: float = DEMO_TIME_SCALE,
                origin: str = "tally.demo/window", sim_config: Mapping[str, Any] | None = None) -> World:
    """Plans, a git repository and receipts for the gates, a fresh ledger, a running simulator."""
    from ..drivers.sim import SimDriver
    from ..plan.parse import read_plan_file
    from ..sim import start as start_sim
    from ..sim.config import config_from_dict

    directory.mkdir(parents=True, exist_ok=True)
    files = [(_plan_file(directory, w), w) for w in windows]
    first = [read_plan_file(path, overrides={"window_id": w.window_id, **w.overrides}).plan for path, w in files]
    repo, qualified, head = make_repository(directory, first)
    admission, rng = write_receipts(directory, qualified, head)
    loaded = [read_plan_file(path, overrides={"window_id": w.window_id, "commit": head, **w.overrides})
              for path, w in files]
    config = dict(sim_config_for([item.plan for item in loaded], time_scale=time_scale))
    config.update(sim_config or {})
    root = generate_key_file(directory / ".tally" / "root.pem", "root")
    book = Ledger(f"sqlite:///{directory / 'tally.db'}")
    book.init(origin, root)
    sim = start_sim(config_from_dict(config), port=0)
    (directory / "site.toml").write_text(f'kind = "sim"\nurl = "{sim.url}"\n')
    return World(directory, book, root, repo, qualified, head, admission, rng, sim, SimDriver.for_handle(sim),
                 time_scale, loaded)


def run_demo(directory: Path, scenario: str = "window", *, quiet: bool = False,
             say: Callable[[str], None] | None = None, time_scale: float = DEMO_TIME_SCALE) -> dict[str, Any]:
    """Run a scenario in ``directory`` (created); returns a summary with ``ok``."""
    import dataclasses

    from ..audit.full import run_audit
    from ..decide.inputs import replay_window
    from ..execution.window import WindowRunner
    from ..plan.register import register_plan
    from ..report.window import window_report

    emit = say or ((lambda _t: None) if quiet else print)
    began = time.perf_counter()
    world = build_world(directory, _windows(scenario), time_scale=time_scale, origin=f"tally.demo/{scenario}")
    book, root = world.book, world.root
    emit(f"tally demo ({scenario}): ledger {directory / 'tally.db'}, simulator at {world.sim.url} "
         f"(hosts {', '.join(HOSTS)}, time scale {time_scale})")
    summary: dict[str, Any] = {"scenario": scenario, "dir": str(directory), "db": str(directory / "tally.db"),
                               "windows": [], "ok": True}
    try:
        registrations = []
        for item in world.plans:  # every gate before any host contact (the rehearsal needs production up)
            reg = register_plan(book, root, item)
            registrations.append(reg)
            emit(f"\nregistered {reg.window} (plan {reg.plan_sha256[:16]}) at seq {reg.seq}")
            pass_gates(book, root, reg.window, repo=world.repo, qualified=world.qualified,
                       admission=world.admission, rng=world.rng, sim_url=world.sim.url, out=directory, say=emit)
        for reg in registrations:
            emit(f"\nwindow {reg.window}")
            pass_chain_gate(book, root, reg.window, emit)
            on_wave = _fault_injector(world.sim, emit) if scenario == "faults" else None
            runner = WindowRunner(book, root, reg.window, world.driver, time_scale=time_scale, say=emit,
                                  on_wave=on_wave)
            result = runner.run()
            replayed = replay_window(book, reg.window)
            report = window_report(book, reg.window, directory / "reports" / reg.window)
            entry = dataclasses.asdict(result) | {"replay": "MATCH" if replayed.match else "MISMATCH",
                                                  "report": report["html"]}
            summary["windows"].append(entry)
            emit(f"decision {result.decision}; replay verdict {entry['replay']}; report {report['html']}")
            if result.blocked or not replayed.match:
                summary["ok"] = False
        world.driver.close()
    finally:
        world.sim.stop()
    from ledger.bundle import export_bundle
    from ledger.signing import sign_checkpoint
    from ledger.stored import verify_ledger

    checkpoint = sign_checkpoint(book, root)
    (directory / "checkpoint.txt").write_text(checkpoint.note)
    verified = verify_ledger(book)
    emit(f"\n{verified.summary()}")
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
         f"reports/ (report.html per window), bundle/ (audit it with `tally audit {bundle}`), plans/, repo/ and the "
         f"receipts the gates read. {summary['seconds']} s.")
    book.close()
    return summary
