"""The README's commands: `make demo` runs `tally demo`; every demo scenario does what it says."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.demo.ledger_tour import ledger_tour
from runner.demo.scenarios import run_demo
from tests.ledger.independent_checker import check_events_jsonl

REPO = Path(__file__).resolve().parents[1]
TALLY = str(Path(sys.executable).with_name("tally"))
SHAPES = json.loads((REPO / "tests" / "fixtures" / "demo_event_shapes.json").read_text())


def event_shapes(db: Path) -> list[list[Any]]:
    """The demo ledger as (stream, type, sorted payload keys), in seq order."""
    connection = sqlite3.connect(db)
    try:
        rows = connection.execute("SELECT stream, type, payload FROM events ORDER BY seq").fetchall()
    finally:
        connection.close()
    return [[stream, type_, sorted(json.loads(payload))] for stream, type_, payload in rows]


def assert_same_shapes(scenario: str, db: Path) -> None:
    """Event types and payload members are a contract: the demo's ledger has the recorded shape."""
    got, want = event_shapes(db), SHAPES[scenario]
    first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    assert got == want, f"{scenario}: first difference at seq {None if first is None else first + 1}: " \
                        f"{got[first] if first is not None else len(got)} != {want[first] if first is not None else len(want)}"


def test_readme_starts_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"^make (\w+)$", readme, flags=re.M)
    assert commands[:2] == ["demo", "test"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:.*\n\t\$\(VENV\)/bin/tally demo$", makefile, flags=re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_every_command_is_documented_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    from typer.main import get_command

    from cli.app import app

    root = get_command(app)
    missing = []
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", None)
        for sub in (subs or {None: cmd}):
            line = f"tally {name}" + (f" {sub}" if sub else "")
            if line not in readme:
                missing.append(line)
    assert missing == []


def test_ledger_tour_catches_its_tamper(tmp_path: Path) -> None:
    lines: list[str] = []
    result = ledger_tour(tmp_path / "tour", say=lines.append)
    assert result.events == 9
    assert (result.caught_seq, result.caught_rule) == (result.tampered_seq, 4)
    assert check_events_jsonl(result.bundle / "events.jsonl") == (9, result.verified_head)
    assert any("caught it" in line for line in lines)
    assert_same_shapes("ledger", tmp_path / "tour" / "tally.db")


def test_tally_demo_default_window(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    proc = subprocess.run([TALLY, "demo", "--dir", str(directory), "--json"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["ok"] and summary["bundle_audit"]
    (only,) = summary["windows"]
    assert only["ending"] == "restored" and only["replay"] == "MATCH" and only["waves"] == 36
    assert summary["audit"]["protocol"]["ok"] and not summary["audit"]["protocol"]["violations"]
    assert (directory / "tally.db").exists() and (directory / "bundle" / "checkpoint.txt").exists()
    assert_same_shapes("window", directory / "tally.db")
    html = Path(only["report"]).read_text()
    assert only["decision"] in html and "data:image/svg+xml;base64," in html
    again = subprocess.run([TALLY, "demo", "--dir", str(directory)], capture_output=True, text=True)
    assert again.returncode == 2 and "not empty" in again.stderr
    audit = subprocess.run([TALLY, "audit", str(directory / "bundle")], capture_output=True, text=True)
    assert audit.returncode == 0 and "every invariant holds" in audit.stdout


@pytest.mark.parametrize(("scenario", "endings", "decisions"), [
    ("pp3", ["restored"], {"CANDIDATE", "NO_PROMOTION"}),
    ("chain", ["chained", "chained", "restored"], {"WIN", "LOSS", "NO_CHANGE", "INCONCLUSIVE"}),
    ("faults", ["restored"], {"INCONCLUSIVE"}),
])
def test_demo_scenarios(tmp_path: Path, scenario: str, endings: list[str], decisions: set[str]) -> None:
    summary = run_demo(tmp_path / scenario, scenario, quiet=True, time_scale=0.01)
    assert summary["ok"], summary
    assert_same_shapes(scenario, tmp_path / scenario / "tally.db")
    assert [w["ending"] for w in summary["windows"]] == endings
    assert all(w["decision"] in decisions and w["replay"] == "MATCH" for w in summary["windows"])
    if scenario == "faults":
        reasons = " ".join(summary["windows"][0]["reasons"])
        assert "thermal dial-back inside the HOLD" in reasons and "wave not counted" in reasons


def test_demo_looks_scenario_refuses_the_best_no_effect_window_and_promotes_a_real_effect(tmp_path: Path) -> None:
    """Equal arms in three chained windows, then another candidate with a real effect: the promotion gate counts
    the chain's three looks (not the other candidate's) and refuses its best; the effect is look 1 of 1, promoted."""
    summary = run_demo(tmp_path / "looks", "looks", quiet=True, time_scale=0.01)
    assert_same_shapes("looks", tmp_path / "looks" / "tally.db")
    assert [w["ending"] for w in summary["windows"]] == ["chained", "chained", "restored", "restored"]
    no_effect, effect = summary["promotion"]
    chain = [e for e in summary["windows"] if e["window"].startswith("looks-aa-")]
    assert no_effect["window"] in {e["window"] for e in chain} and no_effect["verdict"] == "NOT_PROMOTABLE"
    assert no_effect["looks"] == 3 and len(no_effect["seqs"]) == 3 and "looks.budget" in no_effect["failing"]
    assert effect["window"] == "looks-effect" and effect["looks"] == 1 and effect["index"] == 1
    assert effect["verdict"] == "PROMOTABLE", effect
    assert summary["ok"], summary
    assert (tmp_path / "looks" / "looks" / "bundle" / "events.jsonl").exists()


def test_tally_demo_ledger_scenario(tmp_path: Path) -> None:
    proc = subprocess.run([TALLY, "demo", "--scenario", "ledger", "--dir", str(tmp_path / "d")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "caught" in proc.stdout


def test_demo_power_scenario_refuses_three_repeats_and_passes_with_the_repeats_it_names(tmp_path: Path) -> None:
    lines: list[str] = []
    summary = run_demo(tmp_path / "power", "power", say=lines.append, time_scale=0.01)
    assert summary["ok"], summary
    assert_same_shapes("power", tmp_path / "power" / "tally.db")
    dry = [line for line in lines if line.startswith("  dry run | power gate: ")]
    assert len(dry) == 2 and "FAIL (seq" in dry[0] and "PASS (seq" in dry[1]  # the dry run shows the gate
    few, enough = summary["windows"]
    assert (few["repeats"], few["power"], few["admitted"]) == (3, "FAIL", False)
    assert few["figures"]["power"] < 0.8 and few["figures"]["needed"]["repeats"] == enough["repeats"] > 3
    assert enough["power"] == "PASS" and enough["admitted"] and enough["figures"]["power"] >= 0.8
