"""Windows on the real vLLM pair, end to end, as an operator runs them with the ``tally`` CLI.

Arm A is vLLM 0.32 without speculative decoding, arm B the same model with n-gram
speculation (SmolLM2-135M on CPU, examples/site-vllm, resident: both engines kept up and
the serving port routed to the start's engine). Each window: register, budget gate, the
capability probe against production with vLLM's own checks on (admission), dry run,
execute, then verify, audit, replay verdict MATCH, the report, and an exported bundle
audited offline; production serves again at the end. The pp3 window carries the smoke
stage (greedy identity, structured output with ``structured_outputs``, stop, EOS) on
A1 and B1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.store import Ledger

from .test_llama_windows import _ok, _tally
from .vllmpair import EOS, VllmSite


def _digests_match(site: VllmSite, plan: Path) -> None:
    """The example plan declares what the site computes for each arm (model files' sha256 included)."""
    text = plan.read_text()
    for arm in ("plain", "ngram"):
        digest = site.script("digest", arm).stdout.strip()
        assert f'config_digest = "{digest}"' in text, (arm, digest)


def _window(site: VllmSite, home: Path, plan_name: str) -> tuple[str, dict[str, Any], Ledger, dict[str, Any]]:
    """Register, gate, probe (vLLM checks on), dry-run and execute one window."""
    home.mkdir()
    plan = site.directory / plan_name
    _digests_match(site, plan)
    _ok(_tally(home, "init"))
    window_id = _ok(_tally(home, "window", "register", str(plan))).splitlines()[0].strip()
    _ok(_tally(home, "gate", "budget", window_id))
    probe = _tally(home, "rehearse", "--url", site.serving_url, "--eos", str(EOS), "--out", str(home / "rehearsal"),
                   "--window", window_id, "--json", timeout=600)
    evidence = json.loads(_ok(probe))
    assert evidence["verdict"] == "PASS", evidence
    dry = json.loads(_ok(_tally(home, "window", "run", window_id, "--site", str(site.site), "--dry-run", "--json")))
    assert dry["admitted"] and dry["refusals"] == [], dry
    result = json.loads(_ok(_tally(home, "window", "run", window_id, "--site", str(site.site), "--execute", "--json",
                                   timeout=1800)))
    return window_id, result, Ledger.open(f"sqlite:///{home / 'tally.db'}"), evidence


def _after(site: VllmSite, home: Path, window_id: str, book: Ledger) -> list[Any]:
    """The checks every real window ends with; returns the window's events."""
    assert site.facts("preflight")["serving"] == "up"  # production serves again
    _ok(_tally(home, "verify"))
    _ok(_tally(home, "audit"))
    assert json.loads(_ok(_tally(home, "replay", "verdict", window_id, "--json")))["verdict"] == "MATCH"
    _ok(_tally(home, "window", "report", window_id, "--out", str(home / "report")))
    assert (home / "report" / "report.html").exists()
    _ok(_tally(home, "export", str(home / "bundle")))
    offline = json.loads(_ok(_tally(home, "audit", str(home / "bundle"), "--json")))   # the bundle alone
    assert offline, offline
    events = list(book.events(stream=f"window/{window_id}"))
    gates = [e.payload for e in events if e.type == "gate.result"]
    config = {g["start"]: g for g in gates if g["gate"] == "start_config"}
    assert config and all(g["verdict"] == "PASS" for g in config.values()), config
    spec = {g["start"]: g for g in gates if g["gate"] == "standard_spec"}
    starts = [e.payload for e in events if e.type == "start.began"]
    assert set(spec) == {s["start"] for s in starts if s["role"] == "B"}   # the speculative arm only
    # the speculative config the engine itself logged, not the site's arguments
    assert all(g["evidence"]["config"] == {"method": "ngram", "num_speculative_tokens": 4} for g in spec.values())
    assert all(s["clock_cap_mhz"] is None for s in starts)                 # a CPU site: no clocks
    waves = [e.payload for e in events if e.type == "wave.measured"]
    assert waves and all(w["counter_source"]["name"] == "vllm" for w in waves)
    for wave in waves:
        counters = wave["counters"]
        assert wave["complete"] and counters["rounds"] and counters["decode_s"], wave
        if wave["start"].startswith(("B", "s2")):
            assert counters["drafts"] is not None and counters["drafts"] <= counters["rounds"]
        else:
            assert counters["accepted"] == 0
    return events


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "operator"


def test_a_pp3_window_with_the_smoke_stage_on_the_real_vllm_pair(vllm_pair: VllmSite, home: Path) -> None:
    window_id, result, book, evidence = _window(vllm_pair, home, "pp3-vllm.toml")
    try:
        # the admission: production is plain, so the control came back 200 and logit_bias is acted on
        control = next(p for p in evidence["probes"] if p["probe"] == "control")
        assert control["status"] == 200 and control["ok"] and evidence["cause_confirmed"] is False
        assert result["ending"] == "restored", result
        events = _after(vllm_pair, home, window_id, book)
        smoke = {(e.payload["start"], e.payload["probe"]): e.payload for e in events if e.type == "smoke.result"}
        assert set(smoke) == {(s, p) for s in ("A1", "B1") for p in ("greedy_identity", "structured", "stop", "eos")}
        assert smoke[("A1", "greedy_identity")]["outcome"] == "recorded"
        # at T=0 n-gram speculation is lossless: B1 emits A1's tokens (or a near tie is located)
        assert smoke[("B1", "greedy_identity")]["outcome"] in ("pass", "near_tie"), smoke[("B1", "greedy_identity")]
        for start in ("A1", "B1"):
            for probe in ("structured", "stop", "eos"):
                assert smoke[(start, probe)]["outcome"] == "pass", smoke[(start, probe)]
        decision = next(e.payload for e in events if e.type == "decision.recorded")
        assert decision["result"]["decision"] in ("CANDIDATE", "NO_PROMOTION"), decision["result"]
        requests = decision["input"]["requests"]
        assert len(requests) == 4 * 2 and all(r["status"] == "ok" and r["delivered_tokens"] for r in requests)
        # vLLM streams one chunk per engine step: a chunk interval is a round time
        records = [r for e in events if e.type == "wave.measured" for r in e.payload["requests"]]
        assert all(r["round_ms_p95"] is not None for r in records)
    finally:
        book.close()


def test_a_win2_window_on_the_real_vllm_pair(vllm_pair: VllmSite, home: Path) -> None:
    window_id, result, book, _ = _window(vllm_pair, home, "win2-vllm.toml")
    try:
        assert result["ending"] == "restored", result
        events = _after(vllm_pair, home, window_id, book)
        waves = [e.payload for e in events if e.type == "wave.measured"]
        assert len(waves) == 3 * 2 * 2   # three starts x two repeats x two families
        assert all(w["requests"][0]["delivered_tokens"] == 32 for w in waves)   # ignore_eos honoured
        decision = next(e.payload for e in events if e.type == "decision.recorded")
        assert decision["params"]["repeats"] == 2
        assert decision["result"]["decision"] in ("WIN", "LOSS", "NO_CHANGE", "INCONCLUSIVE")
        assert decision["result"]["clocks"].startswith("not applicable")
        assert not any("missing data" in reason for reason in decision["result"]["reasons"]), decision["result"]
    finally:
        book.close()
