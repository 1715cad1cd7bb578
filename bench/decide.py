"""Decision-rule benchmark: `verdict compute` for pp3-v1 (2,000 resamples) and win2-v1.

    python bench/decide.py [--small]

In-process figures (JSON text -> validate -> decide -> JSON text, what `tally verdict compute
--json` does after start-up) against the 100 ms target, the vectorised bootstrap against a
per-resample Python loop, cold start in a fresh interpreter, the CLI's wall time and report
rendering. Prints one table measured in this run; never asserts times.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET_MS = 100.0


def pp3_input(families: int = 2, contexts: tuple[str, ...] = ("short", "32k", "150k"), bootstrap: int = 2000,
              seed: int = 1) -> dict[str, Any]:
    """Seed 003's shape: blocks A1 B1 B2 A2 x families x contexts, B about 8 % faster."""
    rng = random.Random(seed)
    requests = []
    for block in ("A1", "B1", "B2", "A2"):
        for f in range(families):
            for context in contexts:
                decode = rng.uniform(10, 30)
                rate = 90 * (1.08 if block[0] == "B" else 1.0) * rng.uniform(0.95, 1.05)
                requests.append({"block": block, "arm": block[0], "family": f"family{f}", "context": context,
                                 "status": "ok", "delivered_tokens": int(rate * decode), "decode_s": decode,
                                 "ttft_s": rng.uniform(0.4, 0.5), "round_ms_p95": rng.uniform(29, 31)})
    return {"rule": "pp3-v1",
            "params": {"min_gain": 0.05, "bootstrap": bootstrap, "seed": 4103, "interval": 0.90,
                       "max_regression": 0.05},
            "gates_passed": True, "failures": [], "requests": requests}


def win2_input(requests_per_wave: int = 16, seed: int = 2) -> dict[str, Any]:
    """Seed 000's shape: 2 decision cells x s1/s2/s3 x 3 repeats x 2 families = 36 waves."""
    rng = random.Random(seed)
    waves = []
    for cell in ("short-b1", "32k-b1"):
        for start in ("s1", "s2", "s3"):
            for repeat in (1, 2, 3):
                for family in ("opinions", "filings"):
                    rounds = rng.randint(1500, 2500)
                    lift = 1.07 if start == "s2" else 1.0
                    waves.append({"start": start, "cell": cell, "repeat": repeat, "family": family,
                                  "rounds": rounds, "accepted": int(rounds * 2.5 * lift * rng.uniform(0.98, 1.02)),
                                  "decode_s": rounds * 0.02 * rng.uniform(0.98, 1.02),
                                  "ttft_s": [rng.uniform(0.1, 0.2) for _ in range(requests_per_wave)],
                                  "client_tokens_after_first": rounds * 3, "client_decode_s": rounds * 0.02})
    return {"rule": "win2-v1", "params": {"bar": 0.02, "confidence": 0.95, "guard_min_repeats": 2},
            "decision_cells": ["short-b1", "32k-b1"], "production_clock_cap_mhz": 2300,
            "starts": {s: {"role": r, "clock_cap_mhz": 2300} for s, r in (("s1", "A"), ("s2", "B"), ("s3", "A"))},
            "thermal_dialbacks_in_hold": 0, "waves": waves,
            "archive": [{"cell": "short-b1", "pooled_rate_tps": 170.0 + i} for i in range(6)]}


def timings(fn: Callable[[], object], repeat: int) -> list[float]:
    fn()  # warm: imports, t-quantile cache
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return sorted(out)


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def python_loop_bootstrap(data: dict[str, Any]) -> float:
    """The same resamples drawn and summed one at a time in Python (what vectorising replaces)."""
    import numpy as np

    from runner.decide.pp3 import family_sums, parse

    sums = family_sums(parse(data).requests)
    k = len(sums.families)
    rng = np.random.default_rng(data["params"]["seed"])
    idx = rng.integers(0, k, size=(data["params"]["bootstrap"], k)).tolist()
    gains = []
    for row in idx:
        tb = sum(sums.tokens_b[m] for m in row)
        db = sum(sums.decode_b[m] for m in row)
        ta = sum(sums.tokens_a[m] for m in row)
        da = sum(sums.decode_a[m] for m in row)
        gains.append((tb / db) / (ta / da) - 1)
    return float(np.quantile(gains, 0.05))


def cold_start(text: str) -> tuple[float, float]:
    """A fresh interpreter: (import runner.decide, first compute incl. the scipy import) in ms."""
    code = ("import json, sys, time\nt0 = time.perf_counter()\nfrom runner.decide import compute\n"
            "t1 = time.perf_counter()\ncompute(json.loads(sys.stdin.read()))\nt2 = time.perf_counter()\n"
            "print(json.dumps([(t1 - t0) * 1000, (t2 - t1) * 1000]))\n")
    out = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, check=True,
                         cwd=ROOT)
    first, second = json.loads(out.stdout)
    return float(first), float(second)


def cli_wall(path: Path) -> float:
    tally = Path(sys.executable).with_name("tally")
    t0 = time.perf_counter()
    subprocess.run([str(tally), "verdict", "compute", str(path), "--json"], capture_output=True, check=True)
    return (time.perf_counter() - t0) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--small", action="store_true", help="CI smoke: few repetitions, no report rendering")
    args = parser.parse_args(argv)
    repeat = 15 if args.small else 200

    from runner.decide import compute
    from runner.decide.pp3 import Pp3Params, bootstrap_gains, family_sums, parse

    def command(text: str) -> Callable[[], object]:
        return lambda: json.dumps(compute(json.loads(text)))

    pp3 = pp3_input()
    win2 = win2_input()
    pp3_text, win2_text = json.dumps(pp3), json.dumps(win2)
    rows: list[tuple[str, list[float]]] = []
    rows.append(("pp3-v1 verdict compute, 6 pairs, 2,000 resamples", timings(command(pp3_text), repeat)))
    rows.append(("win2-v1 verdict compute, 2 cells, 36 waves", timings(command(win2_text), repeat)))
    sums = family_sums(parse(pp3).requests)
    params = Pp3Params()
    rows.append(("  pp3 bootstrap alone (vectorised), 2,000", timings(lambda: bootstrap_gains(sums, params), repeat)))
    loop = timings(lambda: python_loop_bootstrap(pp3), max(5, repeat // 10))
    rows.append(("  pp3 bootstrap as a Python loop, 2,000", loop))
    big = json.dumps(pp3_input(families=8, contexts=("short", "8k", "32k", "150k"), bootstrap=20000))
    rows.append(("pp3-v1, 32 pairs, 8 families, 20,000 resamples", timings(command(big), max(5, repeat // 10))))

    print(f"decide benchmark ({'small' if args.small else 'full'}: {repeat} repetitions, in-process, after warm-up)")
    print(f"{'figure':<56}{'p50 ms':>10}{'p99 ms':>10}")
    for label, values in rows:
        print(f"  {label:<54}{pct(values, 0.5):>10.3f}{pct(values, 0.99):>10.3f}")

    import_ms, first_ms = cold_start(win2_text)
    print(f"  {'cold: import runner.decide':<54}{import_ms:>10.1f}")
    print(f"  {'cold: first win2 compute (imports scipy.stats)':<54}{first_ms:>10.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (("pp3", pp3_text), ("win2", win2_text)):
            path = Path(tmp) / f"{name}.json"
            path.write_text(text)
            print(f"  {'wall: tally verdict compute ' + name + ' --json (new process)':<54}{cli_wall(path):>10.1f}")
        if not args.small:
            from runner.report import write_report

            for name, data in (("pp3", pp3), ("win2", win2)):
                result = compute(data)
                t0 = time.perf_counter()
                write_report(data, result, Path(tmp) / name)
                print(f"  {'report: ' + name + ' html + md + figures':<54}{(time.perf_counter() - t0) * 1000:>10.1f}")

    pp3_p50, win2_p50 = pct(rows[0][1], 0.5), pct(rows[1][1], 0.5)
    speedup = statistics.median(loop) / pct(rows[2][1], 0.5)
    print(f"ratios: pp3 {pp3_p50:.2f} ms vs target {TARGET_MS:.0f} ms ({'met' if pp3_p50 < TARGET_MS else 'MISSED'}); "
          f"win2 {win2_p50:.2f} ms vs target {TARGET_MS:.0f} ms ({'met' if win2_p50 < TARGET_MS else 'MISSED'}); "
          f"vectorised bootstrap {speedup:.0f}x the Python loop")


if __name__ == "__main__":
    main()
