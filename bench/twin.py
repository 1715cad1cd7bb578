"""The calibrated twin's held-out error on real servers, as the real-server tests recorded it.

    python bench/twin.py [--markdown]

Reads ``bench/out/twin-*.json`` (``twin-llamacpp.json`` written by ``tests/real/test_twin_llama.py``,
``twin-vllm.json`` by ``tests/real/test_twin_vllm.py``: per held-out split, another concurrency level
or another family, a twin calibrated on the other runs) and prints, per server, split, arm and
concurrency level, the twin's relative error (twin - measured) / measured of
the per-request median and p95 of TPOT, ITL and TTFT and of accepted per round. The target is
within 10 %; never asserts (the machine is shared and noisy).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "out"
FIGURES = (("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("ttft_ms", "TTFT"), ("accepted_per_round", "accepted/round"))


def _cell(error: dict[str, float | None] | None) -> str:
    if not error or error.get("p50") is None or error.get("p95") is None:
        return "-"
    return f"{error['p50']:+.1%} / {error['p95']:+.1%}"


def table(split: dict, markdown: bool) -> list[str]:
    head = ["arm", "c", "family", *(f"{label} p50 / p95" for _k, label in FIGURES)]
    rows = [[r["arm"], str(r["concurrency"]), r["family"], *(_cell(r["error"].get(k)) for k, _l in FIGURES)]
            for r in split["held_out_errors"]]
    if markdown:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    widths = [max(len(x) for x in column) for column in zip(head, *rows, strict=True)]
    return ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)) for line in (head, *rows)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    files = sorted(HERE.glob("twin-*.json"))
    if not files:
        print("no recorded twin errors yet (docs/sim.md, \"The twin's error on real servers\")")
        return 0
    for path in files:
        report = json.loads(path.read_text())
        print(f"{path.name}: {report['server']}; {report['requests_per_run']} requests x {report['max_tokens']} "
              f"tokens a run; load average {', '.join(f'{x:.1f}' for x in report['load_average'])} on "
              f"{report['host_cpus']} CPUs")
        if report.get("measuring_s") is not None:
            starts = ", ".join(f"{arm} {s:.0f} s" for arm, s in report.get("engine_start_s", {}).items())
            print(f"measured in {report['measuring_s']:.0f} s (engine starts: {starts or 'not recorded'})")
        for name, split in report["splits"].items():
            calibrated = ", ".join(f"{f} c{c}" for f, c in split["calibrated_on"])
            held = ", ".join(f"{f} c{c}" for f, c in split["held_out"])
            print(f"held out: {name} (calibrated on {calibrated}; predicting {held})")
            for line in table(split, args.markdown):
                print(line)
            median, most = split.get("median_abs_error"), split.get("max_abs_error")
            if median is not None:
                print(f"median |error| {median:.1%}, largest {most:.1%} (target: within 10 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
