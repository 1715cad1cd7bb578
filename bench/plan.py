"""Plan parsing is linear in cells: per-cell time at 10,000 and 100,000 cells, measured in one run.

A plan of N cells (the seed-000 controlled example with its two cells replaced by N
short ones) is written as TOML and read the way ``tally window register`` reads it:
``read_toml`` (bounded: size and nesting), ``parse_plan`` (every field checked), the
plan's digest (``Plan.sha256``: JCS of its JSON form) and its wave schedule
(``Plan.waves``), then once more from the registered JSON form (``parse_plan`` of
``Plan.to_json()``, what every later command reads back). Quadratic parts (a set of the
names so far rebuilt for every cell) made 8,000 cells take 14 s and 40,000 cells 375 s.

Prints the seconds per 1,000 cells at each size and their ratio (1.0 = linear) for the
reading (TOML, checks, digest, read-back) and, apart, for the wave schedule (1.8 million
waves at 100,000 cells: linear too, but its allocations make the collector work more as
the heap grows). Without ``--small`` it asserts the reading's ratio is under ``MAX_RATIO``
and that 100,000 cells (about 8 MiB of TOML; the 16 MiB bound admits some 200,000) are
read and scheduled in under ``MAX_100K_S`` seconds.
``--small`` (CI smoke) runs 2,000 and 20,000 cells and asserts nothing about time.

Usage: ``python bench/plan.py [--small]``.
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ledger.stricttoml import MAX_TOML_BYTES, read_toml  # noqa: E402
from runner.plan.parse import parse_plan  # noqa: E402

EXAMPLE = ROOT / "examples" / "seed000-controlled.toml"
MAX_RATIO = 2.0       # per-cell time at 100,000 over that at 10,000 (a quadratic part gives ~10)
MAX_100K_S = 90.0     # 100,000 cells read, checked, digested, scheduled and read back (2 shared cores)


def plan_toml(cells: int) -> bytes:
    """The controlled example with ``cells`` cells (the first a decision cell)."""
    text = re.sub(r"\[\[cells\]\]\n(?:[^\[\n].*\n|\n)*", "", EXAMPLE.read_text(encoding="utf-8"))
    blocks = "".join(f'[[cells]]\nname = "cell-{i}"\ncontext = "short"\nconcurrency = {1 + i % 4}\n'
                     f'decision = {"true" if i == 0 else "false"}\n\n' for i in range(cells))
    return (text + "\n" + blocks).encode("utf-8")


def read_once(source: bytes) -> dict[str, float]:
    """Seconds for each stage of reading one plan."""
    gc.collect()
    began = time.perf_counter()
    data = read_toml(source, "bench plan")
    toml_s = time.perf_counter()
    plan = parse_plan(data)
    parse_s = time.perf_counter()
    digest = plan.sha256
    digest_s = time.perf_counter()
    waves = len(plan.waves)
    waves_s = time.perf_counter()
    again = parse_plan(plan.to_json(), path="registered plan")
    back_s = time.perf_counter()
    assert again.sha256 == digest and len(again.cells) == len(plan.cells) and waves
    return {"toml": toml_s - began, "parse": parse_s - toml_s, "digest": digest_s - parse_s,
            "waves": waves_s - digest_s, "read_back": back_s - waves_s, "total": back_s - began}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", action="store_true", help="CI smoke: 2,000 and 20,000 cells, no time assertions")
    args = parser.parse_args(argv)
    sizes = (2_000, 20_000) if args.small else (10_000, 100_000)
    print(f"{'cells':>8} {'MiB':>6} {'toml s':>7} {'parse s':>8} {'digest s':>9} {'back s':>7} {'waves s':>8} "
          f"{'total s':>8} {'read ms/1k':>10} {'waves ms/1k':>11}")
    reading: list[float] = []
    waves: list[float] = []
    totals: list[float] = []
    for cells in sizes:
        source = plan_toml(cells)
        assert len(source) <= MAX_TOML_BYTES
        times = read_once(source)
        read_s = times["total"] - times["waves"]
        reading.append(read_s / cells * 1e6)
        waves.append(times["waves"] / cells * 1e6)
        totals.append(times["total"])
        print(f"{cells:8d} {len(source) / (1 << 20):6.2f} {times['toml']:7.2f} {times['parse']:8.2f} "
              f"{times['digest']:9.2f} {times['read_back']:7.2f} {times['waves']:8.2f} {times['total']:8.2f} "
              f"{reading[-1]:10.1f} {waves[-1]:11.1f}")
    ratio = reading[1] / reading[0]
    print(f"per-cell reading time at {sizes[1]:,} over {sizes[0]:,} cells: {ratio:.2f} (1.0 = linear, quadratic "
          f"~{sizes[1] // sizes[0]}; bound {MAX_RATIO:g}); the schedule's: {waves[1] / waves[0]:.2f}; "
          f"{sizes[1]:,} cells in {totals[1]:.1f} s" + ("" if args.small else f" (bound {MAX_100K_S:g} s)"))
    if not args.small:
        assert ratio < MAX_RATIO, f"plan parsing is not linear in cells: ratio {ratio:.2f}"
        assert totals[1] < MAX_100K_S, f"100,000 cells took {totals[1]:.1f} s, over {MAX_100K_S:g} s"
    return 0


if __name__ == "__main__":
    sys.exit(main())
