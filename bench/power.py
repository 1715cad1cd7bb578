"""Power benchmark: `tally window power` for win2-v1 and pp3-v1 at 10,000 simulated windows.

    python bench/power.py [--small]

Each pp3-v1 window runs the rule's 2,000-resample bootstrap. Timed: the whole command in
process (ledger, registered plan, pilot file, every figure including the repeats / pairs
search and, for win2-v1, the analytic cross-check), the vectorised Monte Carlo alone, and
a plain loop through the rules' own ``decide`` on a sample of the same windows,
extrapolated to 10,000 windows (the ratio of the two is the vectorisation's gain). Target:
the command under 10 s on a 2-core machine. Prints one table; never asserts times.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET_S = 10.0
PILOT = {"spread": {"start_sd": 0.003, "repeat_sd": 0.012, "windows": 4}}
PLANS = {"win2-v1": "seed000-production-policy.toml", "pp3-v1": "seed003-abba.toml"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI smoke: 1,000 windows, a short loop sample")
    args = parser.parse_args(argv)
    windows = 1000 if args.small else 10_000
    sample = 20 if args.small else 200

    from typer.testing import CliRunner

    from cli.app import app
    from ledger.keys import generate_key_file
    from ledger.store import Ledger
    from runner.decide.power import design_of
    from runner.decide.power_sim import Pp3Draws, Win2Design, Win2Draws, rule_outcomes
    from runner.decide.spread import parse_pilot
    from runner.plan.parse import read_plan_file
    from runner.plan.register import register_plan

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        signer = generate_key_file(base / ".tally" / "root.pem", "root")
        book = Ledger(f"sqlite:///{base / 'tally.db'}")
        book.init("tally.bench/power", signer)
        pilot = base / "pilot.json"
        pilot.write_text(json.dumps(PILOT))
        for rule, name in PLANS.items():
            loaded = read_plan_file(ROOT / "examples" / name, overrides={"commit": "c0ffee" + "0" * 34})
            register_plan(book, signer, loaded)
            plan = loaded.plan
            command = ["--db", f"sqlite:///{base / 'tally.db'}", "--key", str(base / ".tally" / "root.pem"),
                       "window", "power", plan.window_id, "--spread-from", "pilot", "--pilot", str(pilot),
                       "--windows", str(windows), "--effect", "0.03" if rule == "win2-v1" else "0.06", "--json"]
            began = time.perf_counter()
            result = CliRunner().invoke(app, command)
            command_s = time.perf_counter() - began
            assert result.exit_code == 0, result.output
            figures = json.loads(result.stdout)["figures"]

            design = design_of(plan)
            cells = plan.decision_cells if rule == "win2-v1" else ("pairs",)
            spreads = list(parse_pilot(PILOT, cells).values())
            began = time.perf_counter()
            draws: Win2Draws | Pp3Draws = (Win2Draws(design, spreads, windows, 1) if isinstance(design, Win2Design)
                                           else Pp3Draws(design, spreads[0], windows, 1))
            vector = draws.outcomes(0.03)
            vector_s = time.perf_counter() - began
            began = time.perf_counter()
            looped = rule_outcomes(draws, 0.03, range(sample))
            loop_s = (time.perf_counter() - began) * windows / sample
            assert looped == vector[:sample], "the vectorised path decides as the rule's own code"
            rows.append((rule, windows, command_s, vector_s, loop_s, figures["power"], figures["mde"]))
        book.close()

    print(f"power benchmark ({'small' if args.small else 'full'}: {windows} simulated windows; pp3-v1 with "
          f"2,000 bootstrap resamples each; loop sample {sample} windows, extrapolated)")
    print(f"{'rule':<9} {'windows':>8} {'command s':>10} {'vectorised MC s':>16} {'plain loop s':>13} "
          f"{'ratio':>7} {'power':>7} {'MDE':>7}  target < {TARGET_S:g} s")
    for rule, n, command_s, vector_s, loop_s, power, mde in rows:
        print(f"{rule:<9} {n:>8} {command_s:>10.2f} {vector_s:>16.3f} {loop_s:>13.1f} {loop_s / vector_s:>6.0f}x "
              f"{power:>7.3f} {'-' if mde is None else f'{mde:.2%}':>7}  "
              f"{'ok' if command_s < TARGET_S else 'OVER'}")


if __name__ == "__main__":
    main(sys.argv[1:])
