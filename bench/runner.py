"""Runner overhead: the runner's own time beside the window's measuring, and replay per step.

    python bench/runner.py [--small]

1. The demo window (seed 000 production-policy on the simulator at the demo time scale).
   *Measuring time* is the requests in flight (each wave's first send to its last reply,
   the priming and smoke probes'); *host time* is inside the site's host actions (start an
   engine, drain, restore); the *runner's time* is all the rest of the run, from building
   the runner to the decision: replay, the step machine, records signed and committed,
   attestations, the measurement client's set-up and ``/metrics`` scrapes. Target: the
   runner's time < 3 % of the measuring time. Beside it, the same figure for a real
   llama.cpp window, when a real-server test (``tests/real/test_llama_windows.py``) has
   written it to ``bench/out/real-llama-*.json``, and the old figure: the gaps between
   consecutive waves of a start / measuring (in the client).
2. Replay before each step is O(new events): the same small window on an empty ledger and
   on one holding many unrelated events; the per-step replay time should not grow.
Never asserts times.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REAL_FIGURES = REPO / "bench" / "out"   # written by tests/real/test_llama_windows.py
RUNNER_TARGET = 0.03
sys.path.insert(0, str(REPO))

from ledger.store import NewEvent  # noqa: E402
from runner.demo.scenarios import DEMO_TIME_SCALE, DemoWindow, build_world, pass_gates  # noqa: E402
from runner.execution.window import RunResult, WindowRunner  # noqa: E402
from runner.plan.register import register_plan  # noqa: E402


def _run(directory: Path, window: DemoWindow, *, time_scale: float, prefill: int = 0) -> tuple[RunResult, float]:
    """The run's result, and its wall time from building the runner to the decision."""
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
        began = time.perf_counter()
        result = WindowRunner(world.book, world.root, reg.window, world.driver, time_scale=time_scale).run()
        return result, time.perf_counter() - began
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
        result, run_wall = _run(base / "demo", demo, time_scale=DEMO_TIME_SCALE)
        wall = time.perf_counter() - t
        gaps = sorted(result.wave_gaps_s)
        prefill = 2_000 if args.small else 100_000
        tiny = DemoWindow("seed000-controlled.toml", "bench-replay", {"chain": "none"}, _small)
        empty, _ = _run(base / "empty", tiny, time_scale=0.01)
        full, _ = _run(base / "full", tiny, time_scale=0.01, prefill=prefill)
    per_step_empty = empty.replay_s / max(1, empty.steps) * 1000
    per_step_full = full.replay_s / max(1, full.steps) * 1000
    gap_total = sum(gaps)
    runner_s = run_wall - result.load_s - result.host_s
    client_s = result.measuring_s - result.load_s   # inside the client, outside the requests: set-up, scrapes
    print("\nRunner overhead" + (" (small smoke)" if args.small else ""))
    rows = [
        ("demo window: waves", result.waves),
        ("demo window: steps", result.steps),
        ("demo window: measuring s (requests in flight)", result.load_s),
        ("demo window: host actions s", result.host_s),
        ("demo window: runner s (all the rest)", runner_s),
        ("  of which: in the client, outside requests s", client_s),
        ("  of which: replay s", result.replay_s),
        ("  of which: gaps between waves s (total)", gap_total),
        ("  of which: before the loop (build, checks) s", run_wall - result.runner_s - result.load_s - result.host_s),
        ("demo window: gap per wave ms p50", gaps[len(gaps) // 2] * 1000 if gaps else 0.0),
        ("demo window: gap per wave ms max", gaps[-1] * 1000 if gaps else 0.0),
        ("demo window: runner CPU s (its thread)", result.runner_cpu_s),
        ("demo window: runner ms per wave", runner_s / max(1, result.waves) * 1000),
        ("demo window: wall s (incl. gates, world)", wall),
        (f"replay per step ms, empty ledger ({empty.steps} steps)", per_step_empty),
        (f"replay per step ms, +{prefill:,} events ({full.steps} steps)", per_step_full),
    ]
    for name, value in rows:
        print(f"  {name:<52} {value:>10.3f}" if isinstance(value, float) else f"  {name:<52} {value:>10}")
    # The simulator runs the plan's timing DEMO_TIME_SCALE times faster; the runner's work is not
    # scaled: the window it stands for measures load_s / DEMO_TIME_SCALE.
    planned = result.load_s / DEMO_TIME_SCALE
    share = runner_s / planned if planned else 0.0
    cpu_share = result.runner_cpu_s / planned if planned else 0.0
    compressed = runner_s / result.load_s if result.load_s else 0.0
    gap_share = gap_total / result.measuring_s if result.measuring_s else 0.0
    print("\nRatios (target)")
    print(f"  runner time / measuring time, simulated window     {share:8.2%}   target < {RUNNER_TARGET:.0%}  "
          f"{'met' if share < RUNNER_TARGET else 'NOT met'}   (measuring at the plan's timing: "
          f"{planned:.1f} s = {result.load_s:.2f} s / time scale {DEMO_TIME_SCALE:g})")
    print(f"  runner CPU / measuring time, simulated window      {cpu_share:8.2%}   (the same, the runner's CPU time)")
    print(f"  runner time / simulator's measuring time          {compressed:8.2%}   (at time scale "
          f"{DEMO_TIME_SCALE:g}: the runner is not scaled)")
    real = _real_figures()
    for name, (figure, per_wave) in real.items():
        print(f"  runner time / measuring time, real {name:<16}{figure:8.2%}   target < {RUNNER_TARGET:.0%}  "
              f"{'met' if figure < RUNNER_TARGET else 'NOT met'}   ({per_wave:.0f} ms of runner time per wave, "
              "every step counted)")
    if not real:
        print(f"  runner time / measuring time, real llama.cpp     (no figure: run tests/real/test_llama_windows.py, "
              f"it writes {REAL_FIGURES.relative_to(REPO)}/real-llama-*.json)")
    print(f"  gaps between waves / measuring (in the client)    {gap_share:8.2%}   (the earlier figure)")
    growth = per_step_full / per_step_empty if per_step_empty else 0.0
    print(f"  replay per step, big ledger / empty ledger        {growth:8.2f}   target ~1 (O(new events))")
    return {"runner_share": share, "runner_cpu_share": cpu_share, "compressed_share": compressed,
            "gap_share": gap_share, "replay_growth": growth, "measuring_s": result.load_s,
            **{f"real_{name}": figure for name, (figure, _) in real.items()}}


def _real_figures() -> dict[str, tuple[float, float]]:
    """The real windows' runner time / measuring time and runner ms per wave, as the real-server tests last
    wrote them (a command site's attestation is a process per wave: its cost is per wave, whatever the
    wave's length, and the tests' waves are a few tokens long)."""
    figures: dict[str, tuple[float, float]] = {}
    for path in sorted(REAL_FIGURES.glob("real-llama-*.json")):
        try:
            data = json.loads(path.read_text())
            runner_s = float(data["runner_s"])
            figures[path.stem.removeprefix("real-")] = (runner_s / float(data["load_s"]),
                                                        runner_s / max(1, int(data["waves"])) * 1000)
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
            continue
    return figures


if __name__ == "__main__":
    main()
