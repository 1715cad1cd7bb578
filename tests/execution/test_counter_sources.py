"""Windows read counters through the site's counter source, and say what each wave's arm was.

A pp3-v1 window on a server without /metrics (counter source none) runs on client
figures; a spec-off control's waves count rounds from generated tokens; every wave
records the server's gauges and the runner host's load before and after.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.audit.full import run_audit
from runner.decide.inputs import replay_window
from runner.drivers.sim import SimDriver
from runner.execution.window import WindowRunner
from runner.gates.admission import admit
from runner.state.replay import replay

from .test_start_config import spec_off_control
from .worlds import close, gate_all, run, window, world


def _waves(w: Any, window_id: str) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{window_id}", types=["wave.measured"])]


def tpot_guard(text: str) -> str:
    """The spec-off control plan with pp3-v1's guard on the per-token figure (chunks need not be steps)."""
    return spec_off_control(text).replace("max_regression = 0.05", 'max_regression = 0.05\nguard = "tpot_ms"')


def test_pp3_window_on_a_server_without_metrics_runs_on_client_figures(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed003-abba.toml", "nometrics", edit=tpot_guard)],
              sim_config={"metrics_format": "none"})
    driver = SimDriver.for_handle(w.sim, counter_source="none")
    try:
        gate_all(w)
        if replay(w.book).windows["nometrics"].admitted_seq is None:
            admit(w.book, w.root, "nometrics")
        result = WindowRunner(w.book, w.root, "nometrics", driver, time_scale=w.time_scale).run()
        assert result.ending == "restored", result.blocked
        assert result.decision in ("CANDIDATE", "NO_PROMOTION")
        waves = _waves(w, "nometrics")
        assert waves and all(p["complete"] and p["counters_missing"] == [] for p in waves)
        for p in waves:
            assert p["counter_source"]["name"] == "none" and "no server counters" in p["counter_source"]["absent"]
            assert p["gauges"]["before"] is None and p["gauges"]["after"] is None
            assert len(p["host_load"]["before"]) == 3 and len(p["host_load"]["after"]) == 3
            for r in p["requests"]:   # a chunk is not claimed to be a round: the per-chunk and per-token figures are
                assert r["round_ms_p95"] is None and r["chunk_ms_p95"] is not None and r["token_itl_ms_p95"] is not None
                assert r["tpot_ms"] is not None
        decision = next(e.payload for e in w.book.events(stream="window/nometrics", types=["decision.recorded"]))
        assert decision["params"]["guard"] == "tpot_ms"
        assert not any("guard not evaluable" in r for r in decision["result"]["reasons"])
        assert replay_window(w.book, "nometrics").match
        assert run_audit(book=w.book).ok
    finally:
        driver.close()
        close(w)


def test_spec_off_control_waves_count_rounds_and_every_wave_has_gauges(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed003-abba.toml", "plain", edit=spec_off_control)])
    try:
        gate_all(w)
        assert run(w, "plain").ending == "restored"
        waves = _waves(w, "plain")
        by_role = {"A": [p for p in waves if p["start"].startswith("A")],
                   "B": [p for p in waves if p["start"].startswith("B")]}
        assert by_role["A"] and by_role["B"]
        for p in by_role["A"]:
            c, requests = p["counters"], p["client"]["requests"]
            assert p["counter_source"]["speculative"] is False and p["complete"] and p["counters_missing"] == []
            assert c["accepted"] == 0 and c["rounds"] == c["generation_tokens"] - requests
        for p in by_role["B"]:
            assert p["counter_source"]["speculative"] is True and p["counters"]["rounds"] > 0
            # every decode step counted (one inter-token latency each); a step with one token left drafts nothing
            c, requests = p["counters"], p["client"]["requests"]
            assert c["drafts"] <= c["rounds"] <= c["drafts"] + requests
        for p in waves:
            assert p["counter_source"]["name"] == "vllm" and p["counter_source"]["chunks_are_steps"] is True
            assert p["gauges"]["before"] == {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0}
            assert p["gauges"]["after"]["running"] == 0.0
            assert len(p["host_load"]["before"]) == 3
            assert all(r["round_ms_p95"] == r["chunk_ms_p95"] for r in p["requests"])
        assert replay_window(w.book, "plain").match
    finally:
        close(w)
