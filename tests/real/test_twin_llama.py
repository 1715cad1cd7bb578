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
Small on purpose (six 48-token requests a run, twelve runs, each server warmed by one request of
each family first). The steps are shared with the
vLLM pair's counterpart (``twinerror.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .llamasite import LlamaSite
from .twinerror import REPO, Runs, Workload, arm_runs, held_out, splits, write_report

OUT = Path(os.environ.get("TALLY_TWIN_OUT") or REPO / "bench" / "out" / "twin-llamacpp.json")
LEVELS = (1, 2, 3)


def test_twin_error_held_out_on_the_real_llama_pair(llama_site: LlamaSite, tmp_path: Path) -> None:
    workload = Workload(llama_site.directory / "families", dict.fromkeys(("counts", "rhymes"), LEVELS),
                        requests=6, max_tokens=48, counter_source="llamacpp")
    # warmed first: a server's first request after its start took 1.4-2.0 s to its first token (0.2-0.3 s after)
    measured: Runs = {"plain": arm_runs(llama_site.serving_url, workload, tmp_path, "plain", False, warm=True)}
    try:
        drained = llama_site.script("drain")
        assert drained.returncode == 0, drained.stderr
        started = llama_site.script("start_arm", "lookup", "candidate")
        assert started.returncode == 0, started.stderr
        measured["lookup"] = arm_runs(llama_site.serving_url, workload, tmp_path, "lookup", True, warm=True)
    finally:
        llama_site.script("stop_arm")
        assert llama_site.script("restore").returncode == 0
    errors: dict[str, dict[str, Any]] = {}
    for split in splits("counts", "rhymes", LEVELS):
        errors[split.name], config = held_out(measured, split, {"lookup"}, tmp_path)
        assert config.arm("plain").max_num_seqs == 1        # llama_cpp.server serves one request at a time
    write_report(OUT, "llama.cpp (llama-cpp-python 0.3.36, SmolLM2-135M-Instruct Q4_1, CPU)", workload, errors)
