"""`tally demo --plan PLAN.toml [--sim SIM.toml]`: an operator's own plan, end to end on a simulated pair."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.store import Ledger
from runner.demo.pair import prepare_plan_demo
from runner.demo.scenarios import result_lines, run_demo

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LLAMA_PLAN = EXAMPLES / "site-llamacpp" / "pp3-llamacpp.toml"  # arms with no sim table
TALLY = str(Path(sys.executable).with_name("tally"))


def _plan_copy(tmp_path: Path, text: str | None = None) -> Path:
    """The llama.cpp site's pp3 plan (and its family files) copied to ``tmp_path``, its text changed if given."""
    shutil.copytree(LLAMA_PLAN.parent / "families", tmp_path / "families")
    path = tmp_path / "plan.toml"
    path.write_text(text if text is not None else LLAMA_PLAN.read_text())
    return path


def test_demo_plan_derives_arms_without_sim_tables_and_runs_every_stage(tmp_path: Path) -> None:
    prepared = prepare_plan_demo(LLAMA_PLAN, None, time_scale=0.01)
    assert not prepared.clocks  # the plan registers no clock cap: the simulated site has no GPU clocks
    assert prepared.config["arms"]["plain"]["k"] == 0  # declared speculative = "none"
    assert prepared.config["arms"]["lookup"]["k"] == 8  # declared num_speculative_tokens = 8
    lines: list[str] = []
    summary = run_demo(tmp_path / "d", plan=prepared, say=lines.append)
    text = "\n".join(lines)
    assert "arm A (plain): the plan gives no sim table; derived from what the arm declares: no speculative" in text
    assert "arm B (lookup): the plan gives no sim table; derived" in text and "8 draft tokens" in text
    stages = [line.strip().split(":")[0] for line in lines if line.strip().startswith("stage ")]
    assert stages == ["stage pair", "stage gates", "stage dry run", "stage execute", "stage restore", "stage decide",
                      "stage report", "stage verify", "stage audit"]
    assert "the executed host actions equal the dry run's" in text
    assert summary["ok"] and summary["bundle_audit"] and summary["audit"]["ok"]
    (only,) = summary["windows"]
    assert only["window"] == "llamacpp-pp3" and only["ending"] == "restored" and only["replay"] == "MATCH"
    assert only["decision"] in ("CANDIDATE", "NO_PROMOTION") and Path(only["report"]).exists()
    assert only["dry_run_matched"] is True
    closing = result_lines(summary)
    assert closing[0].startswith("window llamacpp-pp3: ending restored, verdict ") and only["report"] in closing[0]
    assert closing[-1].startswith("verify OK") and "audit PASS" in closing[-1]
    book = Ledger.open(summary["db"])
    try:  # the simulated site had no clocks, as the plan says: no clock cap was read
        actions = {e.payload["action"] for e in book.events(types=["host.action"])}
        assert "read_clock_cap" not in actions and "start_arm" in actions
    finally:
        book.close()


def test_tally_demo_plan_prints_each_stage_and_ends_with_the_result(tmp_path: Path) -> None:
    proc = subprocess.run([TALLY, "demo", "--plan", str(LLAMA_PLAN), "--dir", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    tail = proc.stdout.rstrip().splitlines()[-3:]
    assert tail[0] == "== result =="
    assert tail[1].startswith("window llamacpp-pp3: ending restored, verdict ") and "replay MATCH" in tail[1]
    assert str(tmp_path / "d" / "reports" / "llamacpp-pp3" / "report.html") in tail[1]
    assert tail[2].startswith("verify OK") and "audit PASS; bundle audit PASS" in tail[2]


def test_demo_plan_sim_file_overrides_the_derived_arm(tmp_path: Path) -> None:
    sim = tmp_path / "sim.toml"
    sim.write_text("seed = 3\n\n[arms.lookup]\nk = 3\nacceptance = [0.9, 0.8, 0.7]\n")
    prepared = prepare_plan_demo(LLAMA_PLAN, sim, time_scale=0.01)
    assert any(note.startswith(f"arm B (lookup): {sim}'s [arms.lookup] over ") for note in prepared.notes)
    summary = run_demo(tmp_path / "d", plan=prepared, quiet=True)
    assert summary["ok"], summary
    book = Ledger.open(summary["db"])
    try:
        waves = [e.payload for e in book.events(types=["wave.measured"])]
    finally:
        book.close()
    candidate = [w["counters"] for w in waves if w["start"].startswith("B")]
    # k = 3 from the file (derived from the plan it would be 8): three draft positions counted
    assert candidate and all(len(c["accepted_per_pos"]) == 3 for c in candidate)


def test_demo_plan_with_equal_arms_says_they_are_the_same_engine(tmp_path: Path) -> None:
    text = LLAMA_PLAN.read_text().replace('speculative = "none"', 'speculative = { method = '
                                          '"prompt-lookup-decoding", num_speculative_tokens = 8, '
                                          'verification = "standard" }')
    prepared = prepare_plan_demo(_plan_copy(tmp_path, text), None, time_scale=0.01)
    assert any("simulated as the same engine" in note for note in prepared.notes)


@pytest.mark.parametrize(("change", "files", "message"), [
    (lambda t: t.replace('protocol = "pp3-v1"', 'protocol = "pp9"'), {}, "protocol"),
    (lambda t: t.replace('sha256 = "b36f', 'sha256 = "c36f'), {}, "sha256"),
    (lambda t: t.replace('speculative = "none"', 'speculative = "none"\nsim = { draft_depth = "x" }'), {}, "k"),
    (lambda t: t, {"sim.toml": "[arms.lookup]\nk = 3\n"}, "acceptance"),
    (lambda t: t, {"sim.toml": "time_scale = -1\n"}, "time_scale"),
    (lambda t: t, {"sim.toml": "a = 1\na = 2\n"}, "sim.toml"),
    (lambda t: t, {"sim.toml": 'time_scale = "fast"\n'}, "time_scale"),
    (lambda t: t, {"sim.toml": "arms = 3\n"}, "arms"),
    (lambda t: t, {"sim.toml": "[arms]\nlookup = 3\n"}, "arms.lookup"),
    (lambda t: t, {"sim.toml": "[arms.lookup]\nwarp = 9\n"}, "warp"),
])
def test_demo_plan_refuses_a_bad_plan_or_sim_file_in_one_line(tmp_path: Path, change, files, message) -> None:  # type: ignore[no-untyped-def]
    plan = _plan_copy(tmp_path, change(LLAMA_PLAN.read_text()))
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    args = [TALLY, "demo", "--plan", str(plan), "--dir", str(tmp_path / "d")]
    if "sim.toml" in files:
        args += ["--sim", str(tmp_path / "sim.toml")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "d").exists()  # nothing made


@pytest.mark.parametrize("args", [["--plan", str(LLAMA_PLAN), "--scenario", "pp3"], ["--sim", "sim.toml"],
                                  ["--plan", "/nonexistent/plan.toml"]])
def test_demo_plan_option_misuse_is_one_line(tmp_path: Path, args: list[str]) -> None:
    proc = subprocess.run([TALLY, "demo", "--dir", str(tmp_path / "d"), *args], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "d").exists()
