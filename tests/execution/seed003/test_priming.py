"""Prefix priming (seed 003): identical priming requests per block under the block's own cache_salt,
occupied token counts verified against the declared context sizes, prefill reported apart from decode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.audit.full import run_audit
from runner.decide.inputs import replay_window
from runner.report.window import window_report

from ..worlds import close, gate_all, run
from . import TIME_SCALE, WINDOW, faithful_world

DECLARED = {"short": 128, "32k": 1024, "150k": 4096}


def _events(w: Any, kind: str) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=[kind])]


def _short_runs(text: str) -> str:
    return text.replace("decode_bound_s = 30.0", "decode_bound_s = 6.0")


def test_priming_verifies_occupied_tokens_and_the_waves_find_their_prefix_cached(tmp_path: Path) -> None:
    w = faithful_world(tmp_path, edit=_short_runs)
    try:
        gate_all(w)
        run(w, WINDOW)
        primed = _events(w, "priming.done")
        assert [p["start"] for p in primed] == ["A1", "B1", "B2", "A2"]
        assert all(p["ok"] and not p["failures"] for p in primed), [p["failures"] for p in primed]
        assert len({p["cache_salt"] for p in primed}) == 4  # fixed per block, fresh across blocks
        for p in primed:
            assert len(p["requests"]) == 12  # 6 prompts x 2 identical requests
            assert all(r["prompt_tokens"] == r["declared_tokens"] == DECLARED[r["cell"]] for r in p["requests"])
        # every wave of a block ran under its block's salt, and the prefix cache served its prompt
        salts = {p["start"]: p["cache_salt"] for p in primed}
        truth = w.sim.truth()["requests"]
        waves = [t for t in truth if t["max_tokens"] == 8192]
        assert len(waves) == 24 and {t["cache_salt"] for t in waves} == set(salts.values())
        assert all(t["cached_tokens"] >= t["prompt_tokens"] - 16 for t in waves)
        # prefill apart from decode: the cold priming prefill of the 4096-token prompt is long, the
        # decode run's TTFT (primed) short, and its decode time is the bound
        for p in primed:
            cold = next(r for r in p["requests"] if r["cell"] == "150k" and r["repeat"] == 1)
            again = next(r for r in p["requests"] if r["cell"] == "150k" and r["repeat"] == 2)
            assert again["ttft_s"] < cold["ttft_s"] / 3, (cold, again)
        runs = [r for e in _events(w, "wave.measured") for r in e["requests"] if r["prompt_id"].endswith("150k-01")]
        cold_150k = min(r["ttft_s"] for p in primed for r in p["requests"] if r["cell"] == "150k" and r["repeat"] == 1)
        assert runs and all(r["ttft_s"] < cold_150k / 3 for r in runs)
        # (decode time: the bound, less at most one round of the slower arm, 1 s)
        assert all(r["status"] == "bounded" and r["decode_s"] >= (6.0 - 1.0) * TIME_SCALE * 0.95 for r in runs), runs
        report = (Path(window_report(w.book, WINDOW, tmp_path / "report")["markdown"])).read_text()
        assert "Cold start, prefill and decode (per start)" in report and "| verified |" in report
        assert "6 bounded" in report
        assert replay_window(w.book, WINDOW).match
        assert run_audit(book=w.book).ok
    finally:
        close(w)


def _declared_1000(text: str) -> str:
    return _short_runs(text).replace("context_tokens = 1024", "context_tokens = 1000")


def test_an_occupied_token_count_mismatch_is_recorded_and_holds_the_promotion(tmp_path: Path) -> None:
    w = faithful_world(tmp_path, edit=_declared_1000)
    try:
        gate_all(w)
        run(w, WINDOW)
        primed = _events(w, "priming.done")
        assert len(primed) == 4 and not any(p["ok"] for p in primed)
        expected = sorted(f"{family}/32k ({family[:2]}-32k-01) occupies 1024 tokens, the plan declares 1000"
                          for family in ("opinions", "filings"))
        assert all(sorted(p["failures"]) == expected for p in primed), [p["failures"] for p in primed]
        decision = _events(w, "decision.recorded")[0]
        outcome = decision["result"]
        assert outcome["decision"] == "NO_PROMOTION"
        assert "incomplete: priming in block A1: opinions/32k (op-32k-01) occupies 1024 tokens, the plan declares " \
               "1000" in outcome["reasons"], outcome["reasons"]
        assert len(decision["input"]["incomplete"]) == 8
        report = (Path(window_report(w.book, WINDOW, tmp_path / "report")["markdown"])).read_text()
        assert "priming of start B2 did not verify: filings/32k (fi-32k-01) occupies 1024 tokens" in report
        assert replay_window(w.book, WINDOW).match
    finally:
        close(w)
