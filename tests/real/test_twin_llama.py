"""The calibrated twin's error on the real llama.cpp pair, held out (docs/sim.md "The twin's error").

As an operator would: `tally measure` each arm (plain llama_cpp.server, then prompt-lookup
speculative decoding) on two prompt families at concurrency 1, 2 and 3, and answer two
held-out questions from those runs (`tally sim calibrate` on some, the twin's prediction of
the others): another concurrency level (calibrated on both families at 1 and 2, predicting
3) and another family (calibrated on one family at 1 and 2, predicting the other at 1 and
3). Each held-out run is compared with its prediction: per-request median and p95 of TPOT,
ITL, TTFT and accepted per round, per arm and concurrency level. The errors are written to
``bench/out/twin-llamacpp.json`` (or ``$TALLY_TWIN_OUT``), which ``bench/twin.py`` reads; no
threshold is asserted on this shared machine, only that every figure was computed.
Small on purpose (six 48-token requests a run, twelve runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import runner.sim as sim

from .llamasite import LlamaSite

TALLY = str(Path(sys.executable).with_name("tally"))
REPO = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("TALLY_TWIN_OUT") or REPO / "bench" / "out" / "twin-llamacpp.json")
REQUESTS, MAX_TOKENS = 6, 48
LEVELS = {"counts": (1, 2, 3), "rhymes": (1, 2, 3)}   # what each arm is measured at, per family
# Two held-out questions, answered from the same runs: another concurrency level of families the twin was
# calibrated on (its step and queue model), and another family (whose acceptance it has not seen).
SPLITS = {
    "concurrency": {"calibrate": [("counts", 1), ("counts", 2), ("rhymes", 1), ("rhymes", 2)],
                    "held_out": [("counts", 3), ("rhymes", 3)]},
    "family": {"calibrate": [("counts", 1), ("counts", 2)], "held_out": [("rhymes", 1), ("rhymes", 3)]},
}


def _tally(*args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    return subprocess.run([TALLY, *args], capture_output=True, text=True, env=env, timeout=timeout)


def _measure(site: LlamaSite, out: Path, family: str, concurrency: int, speculative: bool) -> Path:
    done = _tally("measure", "--url", site.serving_url, "--family", str(site.directory / "families" /
                                                                         f"{family}.jsonl"),
                  "--requests", str(REQUESTS), "--max-tokens", str(MAX_TOKENS), "--concurrency", str(concurrency),
                  "--counter-source", "llamacpp", *(() if speculative else ("--spec-off",)), "--deadline", "120",
                  "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def _arm_runs(site: LlamaSite, base: Path, arm: str, speculative: bool) -> dict[tuple[str, int], Path]:
    return {(family, c): _measure(site, base / f"{arm}-{family}-c{c}", family, c, speculative)
            for family, levels in LEVELS.items() for c in levels}


def _split(measured: dict[str, dict[tuple[str, int], Path]], name: str, base: Path) -> dict[str, Any]:
    """Calibrate a twin on the split's calibration runs and compare each held-out run with its prediction."""
    split = SPLITS[name]
    twin = base / f"twin-{name}.toml"
    runs = [a for arm, r in measured.items() for key in split["calibrate"] for a in ("--run", f"{arm}={r[key]}")]
    done = _tally("sim", "calibrate", *runs, "--out", str(twin), "--json")
    assert done.returncode == 0, done.stderr
    fit = json.loads(done.stdout)
    config = sim.load_config(twin)
    assert config.arm("plain").max_num_seqs == 1        # llama_cpp.server serves one request at a time
    rows: list[dict[str, Any]] = []
    for arm, r in measured.items():
        for key in split["held_out"]:
            run = sim.read_run(arm, r[key])
            row = sim.compare(sim.observed_figures(run), sim.predict(config, run))
            rows.append({"split": name, "arm": arm, "family": run.family, "concurrency": run.concurrency, **row})
    for row in rows:
        for figure in ("tpot_ms", "itl_ms", "ttft_ms"):
            assert row["error"][figure] is not None, (row["arm"], row["concurrency"], figure)
        if row["arm"] == "lookup":
            assert row["error"]["accepted_per_round"] is not None
    errors = [abs(e[q]) for row in rows for e in row["error"].values() if e for q in ("p50", "p95")
              if e[q] is not None]
    return {"calibrated_on": split["calibrate"], "held_out": split["held_out"], "fit": fit["arms"],
            "calibration_residuals": [{k: v for k, v in row.items() if k != "path"} for row in fit["residuals"]],
            "held_out_errors": rows, "median_abs_error": sorted(errors)[len(errors) // 2] if errors else None,
            "max_abs_error": max(errors) if errors else None}


def test_twin_error_held_out_on_the_real_llama_pair(llama_site: LlamaSite, tmp_path: Path) -> None:
    measured = {"plain": _arm_runs(llama_site, tmp_path, "plain", False)}
    try:
        drained = llama_site.script("drain")
        assert drained.returncode == 0, drained.stderr
        started = llama_site.script("start_arm", "lookup", "candidate")
        assert started.returncode == 0, started.stderr
        measured["lookup"] = _arm_runs(llama_site, tmp_path, "lookup", True)
    finally:
        llama_site.script("stop_arm")
        assert llama_site.script("restore").returncode == 0
    splits = {name: _split(measured, name, tmp_path) for name in SPLITS}
    report = {
        "server": "llama.cpp (llama-cpp-python 0.3.36, SmolLM2-135M-Instruct Q4_1, CPU)",
        "requests_per_run": REQUESTS, "max_tokens": MAX_TOKENS, "host_cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()), "splits": splits,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    for name, split in splits.items():
        print(f"twin held-out ({name}) error on llama.cpp: median |error| {split['median_abs_error']}, "
              f"max {split['max_abs_error']} ({OUT})")
