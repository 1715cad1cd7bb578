"""The false-promotion rate over looks: many simulated chains of win2-v1 windows (power model 2).

    python bench/looks.py [--chains N] [--seed S]

Per noise and design, chains of k windows of a candidate with no effect (A/A): the share
promoted when each look must pass its spent level (``runner.decide.spending``, alpha 5 %
over K looks), beside the share with a WIN at some look (presenting any WIN, no budget),
with their Monte Carlo standard errors; then a real effect: the share promoted at the first
look and within the K looks. Prints a table and the time; asserts nothing (the unit tests
in ``tests/decide/test_looks.py`` hold the checks at smaller sizes).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    from runner.decide import win2
    from runner.decide.noise import Win2Scenario
    from runner.decide.power_looks import chain_study
    from runner.decide.power_sim import Win2Design
    from runner.decide.spending import LookBudget

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    repeat_only = Win2Scenario(((0.0, 0.0, 0.0),), ((0.05, 0.0, 0.05),), (0.0, 0.95), 0.0)
    docs = Win2Scenario(((0.003, 0.0, 0.003),) * 2, ((0.012, 0.0, 0.012),) * 2, (0.0, 0.95), 0.5, (0.0, 0.5))
    heavy = Win2Scenario(((0.02, 0.0, 0.02),) * 2, ((0.005, 0.0, 0.005),) * 2, (0.0, 0.95), 1.0, (0.0, 1.0))
    cases = [
        ("one cell, repeat noise 5 %", repeat_only, 1, 3, 5, 5),
        ("one cell, repeat noise 5 %", repeat_only, 1, 3, 28, 28),
        ("one cell, repeat noise 5 %", repeat_only, 1, 6, 28, 28),
        ("docs' pilot, two cells", docs, 2, 6, 28, 28),
        ("start-heavy (2 % / 0.5 %)", heavy, 2, 3, 28, 28),
    ]
    print(f"{'noise':<28} {'reps':>4} {'K':>3} {'looks':>5} {'spending':<15} {'promoted':>16} {'any WIN':>16} "
          f"{'1 window':>8} {'s':>5}")
    for name, scenario, cells, repeats, most, looks in cases:
        design = Win2Design(("short-b1", "32k-b1")[:cells], win2.Win2Params(repeats=repeats))
        for spending in ("bonferroni", "pocock"):
            began = time.perf_counter()
            study = chain_study(design, scenario, LookBudget(0.05, most, spending), looks=looks, chains=args.chains,
                                seed=args.seed)
            print(f"{name:<28} {repeats:>4} {most:>3} {looks:>5} {spending:<15} "
                  f"{study.promoted:>8.2%} ± {study.promoted_error:.2%} {study.naive:>8.2%} ± {study.naive_error:.2%} "
                  f"{study.per_look_win:>8.2%} {time.perf_counter() - began:>5.1f}")
    print("\nreal effect, docs' pilot, two cells, 6 repeats, alpha 5 % over 28 looks (bonferroni)")
    design = Win2Design(("short-b1", "32k-b1"), win2.Win2Params(repeats=6))
    for effect in (0.04, 0.05, 0.06):
        study = chain_study(design, docs, LookBudget(0.05, 28), looks=28, chains=args.chains // 5, seed=args.seed + 1,
                            effect=effect)
        first = study.first_promotion[0] / study.chains
        print(f"  effect {effect:+.0%}: promoted at the first look {first:.1%}, within 28 looks {study.promoted:.1%}")


if __name__ == "__main__":
    main()
