"""The calibrated twin's held-out error on a real pair (docs/sim.md "The twin's error on real servers").

What the llama.cpp and the vLLM tests share, done as an operator would with the ``tally``
CLI: ``tally measure`` each arm on the site's prompt families at a few concurrency levels
(:func:`arm_runs`); then, per held-out question (:class:`Split`), ``tally sim calibrate``
on some of those runs and the twin's prediction of each of the others, compared figure by
figure: per-request median and p95 of TPOT, ITL, TTFT and accepted per round, per arm and
concurrency level (:func:`held_out`); and the report ``bench/twin.py`` prints
(:func:`write_report`). No threshold is asserted (the machine is shared and noisy), only
that every figure was computed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import runner.sim as sim

TALLY = str(Path(sys.executable).with_name("tally"))
REPO = Path(__file__).resolve().parents[2]
Case = tuple[str, int]                  # (family, concurrency)
Runs = dict[str, dict[Case, Path]]      # per arm, each case's tally measure --out directory


@dataclass(frozen=True)
class Workload:
    """What every measured run sends: ``requests`` requests of ``max_tokens`` tokens, per family file."""

    families: Path                      # the site's families/ directory (FAMILY.jsonl)
    levels: Mapping[str, Sequence[int]]   # the concurrency levels each family is measured at
    requests: int
    max_tokens: int
    counter_source: str                 # tally measure --counter-source
    deadline_s: float = 120.0


@dataclass(frozen=True)
class Split:
    """One held-out question: calibrate on ``calibrate``, predict ``held_out`` (cases of every arm)."""

    name: str
    calibrate: tuple[Case, ...]
    held_out: tuple[Case, ...]


def splits(first: str, second: str, levels: Sequence[int]) -> tuple[Split, Split]:
    """The two held-out questions, answered from the same runs: another concurrency level of families the twin
    was calibrated on (its step and queue model: both families below the top level, predicting the top), and
    another family, whose acceptance it has not seen (``first`` below the top, predicting ``second`` at the
    lowest level and the top)."""
    low, top = tuple(levels[:-1]), levels[-1]
    return (Split("concurrency", tuple((f, c) for f in (first, second) for c in low), ((first, top), (second, top))),
            Split("family", tuple((first, c) for c in low), ((second, levels[0]), (second, top))))


def tally(*args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    """The ``tally`` CLI, without the test session's TALLY_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    return subprocess.run([TALLY, *args], capture_output=True, text=True, env=env, timeout=timeout)


def measure(url: str, workload: Workload, family: str, concurrency: int, speculative: bool, out: Path) -> Path:
    """One ``tally measure`` run (``--spec-off`` for an arm without speculative decoding)."""
    done = tally("measure", "--url", url, "--family", str(workload.families / f"{family}.jsonl"),
                 "--requests", str(workload.requests), "--max-tokens", str(workload.max_tokens),
                 "--concurrency", str(concurrency), "--counter-source", workload.counter_source,
                 *(() if speculative else ("--spec-off",)), "--deadline", str(workload.deadline_s), "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def arm_runs(url: str, workload: Workload, base: Path, arm: str, speculative: bool,
             warm: bool = False) -> dict[Case, Path]:
    """Every case of the workload measured on one arm's server at ``url`` (``warm``: after one request of each
    family at concurrency 1, not kept, so that a server's first requests after its start are not measured)."""
    if warm:
        for family in workload.levels:
            done = tally("measure", "--url", url, "--family", str(workload.families / f"{family}.jsonl"),
                         "--requests", "1", "--max-tokens", "8", "--counter-source", "none",
                         "--deadline", str(workload.deadline_s))
            assert done.returncode == 0, done.stderr[-2000:]
    return {(family, c): measure(url, workload, family, c, speculative, base / f"{arm}-{family}-c{c}")
            for family, levels in workload.levels.items() for c in levels}


def held_out(measured: Runs, split: Split, speculative: set[str], base: Path) -> tuple[dict[str, Any],
                                                                                      sim.SimConfig]:
    """Calibrate a twin on the split's calibration runs and compare each held-out run with its prediction.

    Returns the split's report (the fit, its residuals, every held-out error and their median and largest
    magnitude) and the twin. Every timing figure must have been computed, and accepted per round for the
    ``speculative`` arms."""
    twin = base / f"twin-{split.name}.toml"
    runs = [a for arm, r in measured.items() for case in split.calibrate for a in ("--run", f"{arm}={r[case]}")]
    done = tally("sim", "calibrate", *runs, "--out", str(twin), "--json")
    assert done.returncode == 0, done.stderr
    fit = json.loads(done.stdout)
    config = sim.load_config(twin)
    rows: list[dict[str, Any]] = []
    for arm, r in measured.items():
        for case in split.held_out:
            run = sim.read_run(arm, r[case])
            row = sim.compare(sim.observed_figures(run), sim.predict(config, run))
            rows.append({"split": split.name, "arm": arm, "family": run.family, "concurrency": run.concurrency,
                         **row})
    for row in rows:
        for figure in ("tpot_ms", "itl_ms", "ttft_ms"):
            assert row["error"][figure] is not None, (row["arm"], row["concurrency"], figure)
        if row["arm"] in speculative:
            assert row["error"]["accepted_per_round"] is not None, (row["arm"], row["concurrency"])
    errors = sorted(abs(e[q]) for row in rows for e in row["error"].values() if e for q in ("p50", "p95")
                    if e[q] is not None)
    report = {"calibrated_on": [list(c) for c in split.calibrate], "held_out": [list(c) for c in split.held_out],
              "fit": fit["arms"],
              "calibration_residuals": [{k: v for k, v in row.items() if k != "path"} for row in fit["residuals"]],
              "held_out_errors": rows, "median_abs_error": errors[len(errors) // 2] if errors else None,
              "max_abs_error": errors[-1] if errors else None}
    return report, config


def write_report(out: Path, server: str, workload: Workload, splits: Mapping[str, Mapping[str, Any]],
                 **extra: Any) -> None:
    """The errors where ``bench/twin.py`` reads them, and one line per split on the test's output."""
    report = {"server": server, "requests_per_run": workload.requests, "max_tokens": workload.max_tokens,
              "host_cpus": os.cpu_count(), "load_average": list(os.getloadavg()), **extra, "splits": dict(splits)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    for name, split in splits.items():
        print(f"twin held-out ({name}) error on {server}: median |error| {split['median_abs_error']}, "
              f"max {split['max_abs_error']} ({out})")
