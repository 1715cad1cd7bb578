"""Power benchmark: `tally window power` for win2-v1 and pp3-v1 at 10,000 simulated windows, and the model studies.

    python bench/power.py [--small] [--no-study]

Each pp3-v1 window runs the rule's 2,000-resample bootstrap. Timed: the whole command in
process (ledger, registered plan, the demo's pilot file, every figure including the
repeats / pairs search and, for win2-v1, the analytic check), the vectorised Monte Carlo
of power model 2 alone (and model 1's, kept to replay old results), and a plain loop
through the rules' own ``decide`` on a sample of the same windows, extrapolated to 10,000
windows (the ratio of the two is the vectorisation's gain). Target: the command under
10 s on a 2-core machine.

The studies (big Monte Carlo, not for the unit tests): brute-force windows of known worlds
(``tests/decide/brute_power.py``: per-wave data decided by ``win2.decide``) against model 2
with its noise estimated from those worlds' control starts, and model 1 beside it: a
start-heavy world whose cells share the start offset (the false-WIN rate), and one whose
client decode rate moves with the server rate (the false-LOSS rate and the power). Prints
tables; never asserts times.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET_S = 10.0
PLANS = {"win2-v1": "seed000-production-policy.toml", "pp3-v1": "seed003-abba.toml"}


def _commands(windows: int, sample: int) -> list[tuple[str, int, float, float, float, float, float, float | None]]:
    from typer.testing import CliRunner

    from cli.app import app
    from ledger.keys import generate_key_file
    from ledger.store import Ledger
    from runner.decide import pp3, win2
    from runner.decide.pilot import parse_pilot_noise
    from runner.decide.power import design_of
    from runner.decide.power_pp3 import Pp3Sim
    from runner.decide.power_sim import Pp3Draws, Win2Design, Win2Draws
    from runner.decide.power_win2 import Win2Sim
    from runner.decide.spread import parse_pilot
    from runner.demo.scenarios import POWER_PILOT
    from runner.plan.parse import read_plan_file
    from runner.plan.register import register_plan

    plain = {"start_sd": 0.003, "repeat_sd": 0.012, "windows": 4}
    pilots = {"win2-v1": POWER_PILOT, "pp3-v1": {"spread": plain, "rates": {"short": 330, "32k": 200, "150k": 100}}}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        signer = generate_key_file(base / ".tally" / "root.pem", "root")
        book = Ledger(f"sqlite:///{base / 'tally.db'}")
        book.init("tally.bench/power", signer)
        for rule, name in PLANS.items():
            pilot = base / f"{rule}.json"
            pilot.write_text(json.dumps(pilots[rule]))
            loaded = read_plan_file(ROOT / "examples" / name, overrides={"commit": "c0ffee" + "0" * 34})
            register_plan(book, signer, loaded)
            plan = loaded.plan
            command = ["--db", f"sqlite:///{base / 'tally.db'}", "--key", str(base / ".tally" / "root.pem"),
                       "window", "power", plan.window_id, "--spread-from", "pilot", "--pilot", str(pilot),
                       "--windows", str(windows), "--effect", "0.035" if rule == "win2-v1" else "0.06", "--json"]
            began = time.perf_counter()
            result = CliRunner().invoke(app, command)
            command_s = time.perf_counter() - began
            assert result.exit_code == 0, result.output
            figures = json.loads(result.stdout)["figures"]

            design = design_of(plan)
            cells = plan.decision_cells if rule == "win2-v1" else ("pairs",)
            contexts = () if isinstance(design, Win2Design) else design.contexts
            read = parse_pilot_noise(pilots[rule], cells, protocol=rule, contexts=contexts)
            began = time.perf_counter()
            sim: Win2Sim | Pp3Sim
            if isinstance(design, Win2Design):
                assert read.win2 is not None
                sim = Win2Sim(design, read.win2.scenarios()[0], windows, 1)
            else:
                assert read.pp3 is not None
                sim = Pp3Sim(design, read.pp3, windows, 1)
            vector = sim.outcomes(0.03)
            vector_s = time.perf_counter() - began
            spreads = list(parse_pilot({"spread": plain}, cells).values())
            began = time.perf_counter()
            old: Win2Draws | Pp3Draws = (Win2Draws(design, spreads, windows, 1) if isinstance(design, Win2Design)
                                         else Pp3Draws(design, spreads[0], windows, 1))
            old.outcomes(0.03)
            old_s = time.perf_counter() - began
            began = time.perf_counter()
            looped = [str((win2.decide(sim.rule_input(i, 0.03)) if isinstance(sim, Win2Sim)
                           else pp3.decide(sim.rule_input(i, 0.03)))["decision"]) for i in range(sample)]
            loop_s = (time.perf_counter() - began) * windows / sample
            assert looped == vector[:sample], "the vectorised path decides as the rule's own code"
            rows.append((rule, windows, command_s, vector_s, old_s, loop_s, figures["power"], figures["mde"]))
        book.close()
    return rows


def _studies(small: bool) -> list[tuple[str, str, float, float, float, float]]:
    """(world, figure, brute force, its MC error, model 2, model 1)."""
    from runner.decide import win2
    from runner.decide.noise import estimate_win2_noise
    from runner.decide.power import power_figures
    from runner.decide.power_sim import Win2Design
    from runner.decide.power_v1 import power_figures_v1
    from tests.decide.brute_power import World, control_pairs, decisions, rate

    pilot_n, brute_n, model_n = (300, 1000, 20_000) if small else (1500, 10_000, 200_000)
    worlds = {
        "start-heavy, offset shared (2 % start, 0.5 % per repeat)": World(start_sd=0.02, wave_sd=0.007,
                                                                          cell_share=1.0),
        "decode moves with the rate, accepted on its own (0.3 %, 1.2 %)": World(
            start_sd=0.003, wave_sd=0.017, cell_share=0.5, client_sd=0.003, accepted_start_sd=0.001,
            accepted_wave_sd=0.002),
    }
    rows = []
    design = Win2Design(("short-b1", "32k-b1"), win2.Win2Params(repeats=3))
    for name, world in worlds.items():
        _, noise = estimate_win2_noise(design.cells, control_pairs(world, pilot_n, seed=1), source="pilot")
        assert noise is not None
        for effect in (0.0, 0.04):
            new = power_figures(design, noise, effect=effect, windows=model_n, seed=1, search=False, analytic=False)
            old = power_figures_v1(design, list(noise.primary), effect=effect, windows=model_n, seed=1, search=False,
                                   analytic=False)
            brute = decisions(world, effect, brute_n, seed=7)
            for outcome in ("WIN", "LOSS"):
                p, se = rate(brute, outcome)
                rows.append((name, f"P({outcome}) at {effect:+.0%}", p, se,
                             new["outcomes"]["at_effect"][outcome]["p"], old["outcomes"]["at_effect"][outcome]["p"]))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI smoke: 1,000 windows, a short loop sample")
    parser.add_argument("--no-study", action="store_true", help="time the command only")
    args = parser.parse_args(argv)
    windows = 1000 if args.small else 10_000
    sample = 20 if args.small else 200
    rows = _commands(windows, sample)
    print(f"power benchmark ({'small' if args.small else 'full'}: {windows} simulated windows; pp3-v1 with "
          f"2,000 bootstrap resamples each; loop sample {sample} windows, extrapolated)")
    print(f"{'rule':<9} {'windows':>8} {'command s':>10} {'model 2 MC s':>13} {'model 1 MC s':>13} "
          f"{'plain loop s':>13} {'ratio':>7} {'power':>7} {'MDE':>7}  target < {TARGET_S:g} s")
    for rule, n, command_s, vector_s, old_s, loop_s, power, mde in rows:
        print(f"{rule:<9} {n:>8} {command_s:>10.2f} {vector_s:>13.3f} {old_s:>13.3f} {loop_s:>13.1f} "
              f"{loop_s / vector_s:>6.0f}x {power:>7.3f} {'-' if mde is None else f'{mde:.2%}':>7}  "
              f"{'ok' if command_s < TARGET_S else 'OVER'}")
    if args.no_study:
        return
    began = time.perf_counter()
    study = _studies(args.small)
    print(f"\nmodel studies ({time.perf_counter() - began:.0f} s): brute-force windows (per-wave data, win2.decide) "
          "against the models, noise estimated from the world's control starts")
    print(f"{'world':<66} {'figure':<16} {'brute':>7} {'+-':>6} {'model 2':>8} {'model 1':>8}  "
          "model 2 within 4 MC errors")
    for name, figure, p, se, new, old in study:
        within = abs(new - p) <= 4 * math.hypot(se, 0.001) + 0.005
        print(f"{name:<66} {figure:<16} {p:>7.3f} {se:>6.3f} {new:>8.3f} {old:>8.3f}  {'yes' if within else 'NO'}")


if __name__ == "__main__":
    main(sys.argv[1:])
