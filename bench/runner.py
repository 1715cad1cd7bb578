"""Runner overhead: time between waves spent outside measuring, and replay per step.

    python bench/runner.py [--small]

1. The demo window (seed 000 production-policy on the simulator at the demo time scale):
   measuring time, the gaps between consecutive waves of a start (replay, decide, sign and
   append the wave, prepare the next), their share of the measuring time (target < 5%),
   and the runner's whole overhead beside the host actions.
2. Replay before each step is O(new events): the same small window on an empty ledger and
   on one holding many unrelated events; the per-step replay time should not grow.
Never asserts times.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ledger.store import NewEvent  # noqa: E402
from runner.demo.scenarios import DEMO_TIME_SCALE, DemoWindow, build_world, pass_gates  # noqa: E402
from runner.execution.window import RunResult, WindowRunner  # noqa: E402
from runner.plan.register import register_plan  # noqa: E402


def _run(directory: Path, window: DemoWindow, *, time_scale: float, prefill: int = 0) -> RunResult:
    world = build_world(directory, [window], time_scale=time_scale, origin="bench/runner")
    try:
        if prefill:
            for start in range(0, prefill, 5000):
                world.book.append_many([NewEvent("notes/bench", "note.added", {"i": start + i, "text": "x" * 80})
                                        for i in range(min(5000, prefill - start))], world.root)
        reg = register_plan(world.book, world.root, world.plans[0])
        pass_gates(world.book, world.root, reg.window, repo=world.repo, qualified=world.qualified,
                   admission=world.admission, rng=world.rng, sim_url=world.sim.url, out=directory,
                   say=lambda _t: None)
        return WindowRunner(world.book, world.root, reg.window, world.driver, time_scale=time_scale).run()
    finally:
        world.driver.close()
        world.sim.stop()
        world.book.close()


def _small(text: str) -> str:
    import re

    text = re.sub(r"max_tokens = \d+", "max_tokens = 32", text)
    return re.sub(r'orders = \{ short = \["(\w+-short-\d+)"[^]]*\], 32k = \["(\w+-32k-\d+)"[^]]*\] \}',
                  r'orders = { short = ["\1"], 32k = ["\2"] }', text)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", action="store_true", help="CI smoke: a small window, a small prefill")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        demo = DemoWindow("seed000-production-policy.toml", "bench-demo", {"chain": "none"},
                          _small if args.small else None)
        t = time.perf_counter()
        result = _run(base / "demo", demo, time_scale=DEMO_TIME_SCALE)
        wall = time.perf_counter() - t
        gaps = sorted(result.wave_gaps_s)
        prefill = 2_000 if args.small else 100_000
        tiny = DemoWindow("seed000-controlled.toml", "bench-replay", {"chain": "none"}, _small)
        empty = _run(base / "empty", tiny, time_scale=0.01)
        full = _run(base / "full", tiny, time_scale=0.01, prefill=prefill)
    per_step_empty = empty.replay_s / max(1, empty.steps) * 1000
    per_step_full = full.replay_s / max(1, full.steps) * 1000
    gap_total = sum(gaps)
    print("\nRunner overhead" + (" (small smoke)" if args.small else ""))
    rows = [
        ("demo window: waves", result.waves),
        ("demo window: measuring s (inside measure_wave)", result.measuring_s),
        ("demo window: gaps between waves s (total)", gap_total),
        ("demo window: gap per wave ms p50", gaps[len(gaps) // 2] * 1000 if gaps else 0.0),
        ("demo window: gap per wave ms max", gaps[-1] * 1000 if gaps else 0.0),
        ("demo window: runner overhead s (all but measuring)", result.overhead_s),
        ("demo window: steps", result.steps),
        ("demo window: wall s (incl. gates, world)", wall),
        (f"replay per step ms, empty ledger ({empty.steps} steps)", per_step_empty),
        (f"replay per step ms, +{prefill:,} events ({full.steps} steps)", per_step_full),
    ]
    for name, value in rows:
        print(f"  {name:<52} {value:>10.3f}" if isinstance(value, float) else f"  {name:<52} {value:>10}")
    share = gap_total / result.measuring_s if result.measuring_s else 0.0
    print("\nRatios (target)")
    print(f"  gaps between waves / measuring time              {share:8.2%}   target < 5%  "
          f"{'met' if share < 0.05 else 'NOT met'}")
    growth = per_step_full / per_step_empty if per_step_empty else 0.0
    print(f"  replay per step, big ledger / empty ledger        {growth:8.2f}   target ~1 (O(new events))")
    return {"gap_share": share, "replay_growth": growth, "measuring_s": result.measuring_s}


if __name__ == "__main__":
    main()
