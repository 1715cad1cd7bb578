"""Windows on a real llama.cpp pair, end to end, as an operator runs them with the `tally` CLI.

Arm A is llama_cpp.server without speculative decoding, arm B the same model with
prompt-lookup speculative decoding (SmolLM2-135M on CPU, examples/site-llamacpp). Each
window: register, budget gate, the capability probe against production (admission),
dry run, execute, then verify, audit, replay verdict MATCH and the report; production
serves again at the end. Tiny on purpose: one request per wave, 32 tokens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ledger.store import Ledger

from .llamasite import LlamaSite

TALLY = str(Path(sys.executable).with_name("tally"))
# llama-cpp-python drops these request fields; the operator accepts them knowingly, and the
# acceptance is recorded in the rehearsal gate's evidence (docs/real-servers.md).
ACCEPTED = ("cache_salt", "stream_options.include_usage")
REAL_FIGURES = Path(__file__).resolve().parents[2] / "bench" / "out"  # read by bench/runner.py


def _tally(home: Path, *args: str, timeout: float = 900.0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
    env.update(TALLY_DB=str(home / "tally.db"))  # the key: .tally/root.pem beside the database
    return subprocess.run([TALLY, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=home)


def _ok(done: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert done.returncode == code, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def _window(site: LlamaSite, home: Path, plan_name: str) -> tuple[str, dict[str, Any], Ledger]:
    """Register, gate, probe, dry-run and execute one window; return its id, run result and ledger."""
    home.mkdir()
    _ok(_tally(home, "init"))
    plan = site.directory / plan_name
    window_id = _ok(_tally(home, "window", "register", str(plan))).splitlines()[0].strip()
    _ok(_tally(home, "gate", "budget", window_id))
    accept = [arg for field in ACCEPTED for arg in ("--accept-ignored", field)]
    probe = _tally(home, "rehearse", "--url", site.serving_url, "--eos", "2", "--out", str(home / "rehearsal"),
                   "--window", window_id, "--no-vllm-checks", *accept, "--json")
    evidence = json.loads(_ok(probe))
    assert evidence["verdict"] == "PASS", evidence
    fields = evidence["evidence"]["fields"] if "evidence" in evidence else evidence["fields"]
    assert fields["seed"] == "honoured" and fields["max_tokens"] == "honoured"
    assert fields["ignore_eos"] == "honoured"  # serve.py honours it; llama_cpp.server alone drops it
    assert all(fields[f] == "ignored" for f in ACCEPTED)
    # what the smoke probes would run on: llama-cpp-python honours these (its response_format, not vLLM's fields)
    assert fields["stop"] == fields["min_tokens"] == fields["response_format"] == "honoured", fields
    assert fields["structured_outputs"] == fields["guided_json"] == "ignored", fields
    dry = json.loads(_ok(_tally(home, "window", "run", window_id, "--site", str(site.site), "--dry-run", "--json")))
    assert dry["admitted"] and dry["refusals"] == [] and dry["arms_checked"]   # the site's list_arms: as declared
    result = json.loads(_ok(_tally(home, "window", "run", window_id, "--site", str(site.site), "--execute",
                                   "--json")))
    _write_figure(plan_name, result)
    book = Ledger.open(f"sqlite:///{home / 'tally.db'}")
    return window_id, result, book


def _write_figure(plan_name: str, result: dict[str, Any]) -> None:
    """The runner's share of the window, for ``bench/runner.py`` (which prints it when the file is there)."""
    figure = {key: result[key] for key in ("waves", "steps", "load_s", "host_s", "runner_s", "measuring_s",
                                           "overhead_s", "replay_s")}
    assert figure["load_s"] > 0 and figure["runner_s"] > 0, figure
    REAL_FIGURES.mkdir(parents=True, exist_ok=True)
    (REAL_FIGURES / f"real-llama-{Path(plan_name).stem}.json").write_text(json.dumps(
        {"plan": plan_name, **figure, "runner_share": figure["runner_s"] / figure["load_s"]}, indent=1) + "\n")


def _after(site: LlamaSite, home: Path, window_id: str, book: Ledger) -> list[Any]:
    """The checks every real window ends with; returns the window's events."""
    assert site.facts("preflight")["serving"] == "up"  # production serves again
    _ok(_tally(home, "verify"))
    _ok(_tally(home, "audit"))
    assert json.loads(_ok(_tally(home, "replay", "verdict", window_id, "--json")))["verdict"] == "MATCH"
    _ok(_tally(home, "window", "report", window_id, "--out", str(home / "report")))
    assert (home / "report" / "report.html").exists()
    events = list(book.events(stream=f"window/{window_id}"))
    gates = [e.payload for e in events if e.type == "gate.result"]
    config = {g["start"]: g for g in gates if g["gate"] == "start_config"}
    assert config and all(g["verdict"] == "PASS" for g in config.values()), config
    spec = {g["start"] for g in gates if g["gate"] == "standard_spec"}
    plan_starts = [e.payload for e in events if e.type == "start.began"]
    assert spec == {s["start"] for s in plan_starts if s["role"] == "B"}  # the speculative arm only
    assert all(s["clock_cap_mhz"] is None for s in plan_starts)        # a CPU site: no clocks
    assert not any(e.type == "host.action" and e.payload["action"] == "read_clock_cap" for e in events)
    waves = [e.payload for e in events if e.type == "wave.measured"]
    assert waves and all(w["counter_source"]["name"] == "llamacpp" for w in waves)
    assert all(w["host_load"]["before"] is not None for w in waves)
    return events


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "operator"


def test_a_pp3_window_on_the_real_pair(llama_site: LlamaSite, home: Path) -> None:
    window_id, result, book = _window(llama_site, home, "pp3-llamacpp.toml")
    try:
        assert result["ending"] == "restored", result
        assert result["decision"] in ("CANDIDATE", "NO_PROMOTION"), result
        events = _after(llama_site, home, window_id, book)
        decision = next(e.payload for e in events if e.type == "decision.recorded")
        requests = decision["input"]["requests"]
        assert len(requests) == 4 * 2  # four blocks x two families x one prompt, every one in the input
        assert all(r["status"] == "ok" and r["delivered_tokens"] and r["tpot_ms"] for r in requests), requests
        assert decision["params"]["guard"] == "tpot_ms"
        # one token per chunk on llama.cpp: no chunk interval was called a round
        records = [r for e in events if e.type == "wave.measured" for r in e.payload["requests"]]
        assert all(r["round_ms_p95"] is None for r in records)
        # ... and each chunk carried one token, so the per-token ITL is the per-chunk interval
        for r in records:
            assert r["token_itl_ms_p95"] == pytest.approx(r["chunk_ms_p95"], rel=1e-6), r
        assert not any("not evaluable" in reason for reason in decision["result"]["reasons"])
    finally:
        book.close()


def test_a_win2_window_on_the_real_pair(llama_site: LlamaSite, home: Path) -> None:
    window_id, result, book = _window(llama_site, home, "win2-llamacpp.toml")
    try:
        assert result["ending"] == "restored", result
        events = _after(llama_site, home, window_id, book)
        waves = [e.payload for e in events if e.type == "wave.measured"]
        assert len(waves) == 3 * 2 * 2  # three starts x two repeats x two families
        for wave in waves:
            counters = wave["counters"]
            assert counters["rounds"] and counters["decode_s"], wave  # the engine's own round counts
            if wave["start"] == "s2":
                assert counters["accepted"] is not None and counters["drafts"] is not None
            else:
                assert counters["accepted"] == 0  # the plain control accepts nothing
        decision = next(e.payload for e in events if e.type == "decision.recorded")
        assert decision["params"]["repeats"] == 2
        assert decision["result"]["decision"] in ("WIN", "LOSS", "NO_CHANGE", "INCONCLUSIVE")
        assert decision["result"]["clocks"].startswith("not applicable")
        assert not any("missing data" in reason for reason in decision["result"]["reasons"]), decision["result"]
    finally:
        book.close()


def test_the_example_site_refuses_a_round_guard_before_any_host_action(llama_site: LlamaSite, home: Path,
                                                                        tmp_path: Path) -> None:
    """A pp3 plan that keeps the p95-round guard cannot decide on a server that streams per token."""
    plan = llama_site.directory / "pp3-roundguard.toml"
    shutil.copy(llama_site.directory / "pp3-llamacpp.toml", plan)
    text = plan.read_text().replace('guard = "tpot_ms"', "").replace('"llamacpp-pp3"', '"llamacpp-roundguard"')
    plan.write_text(text)
    home.mkdir()
    _ok(_tally(home, "init"))
    _ok(_tally(home, "window", "register", str(plan)))
    dry = _tally(home, "window", "run", "llamacpp-roundguard", "--site", str(llama_site.site), "--dry-run", "--json")
    assert dry.returncode == 1
    refusals = json.loads(dry.stdout)["refusals"]
    assert len(refusals) == 1 and 'guard = "tpot_ms"' in refusals[0] and "not an engine step" in refusals[0]


def test_the_example_site_refuses_an_arm_it_would_start_with_another_digest(llama_site: LlamaSite,
                                                                            home: Path) -> None:
    """The site's list_arms says what each start would report: a plan declaring another config_digest for
    the candidate (a stale digest, another model file) is refused before any host action."""
    plan = llama_site.directory / "pp3-stale.toml"
    text = (llama_site.directory / "pp3-llamacpp.toml").read_text()
    stale = "30871e973a08e4bbbf455b0c70edee9ff847364a1831727c7c7bd6b586bfa056"
    assert stale in text
    plan.write_text(text.replace(stale, "ab" * 32).replace('"llamacpp-pp3"', '"llamacpp-stale"'))
    home.mkdir()
    _ok(_tally(home, "init"))
    _ok(_tally(home, "window", "register", str(plan)))
    log = llama_site.site.parent / "state" / "actions.log"
    before = log.read_text().splitlines() if log.exists() else []
    dry = _tally(home, "window", "run", "llamacpp-stale", "--site", str(llama_site.site), "--dry-run", "--json")
    assert dry.returncode == 1, dry.stderr
    refusals = json.loads(dry.stdout)["refusals"]
    assert len(refusals) == 1 and "arm 'lookup' declares config_digest abababab" in refusals[0], refusals
    assert "reports 30871e973a08e4bb" in refusals[0]   # the digest the real site computes from its model file
    after = log.read_text().splitlines()
    assert after[len(before):] == ["list_arms"] and llama_site.facts("preflight")["serving"] == "up"
