"""The README's commands: `make demo` runs `tally demo`; every demo scenario does what it says.

The scenarios' runs are the session's shared ones (``tests/demo_runs.py``: the installed wheel's
``tally demo``, each scenario once, which ``tests/test_packaging.py`` reads too); the power
scenario, whose step lines are read, runs here in the process.
"""

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
from tests.demo_runs import DemoRuns
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


def test_tally_demo_default_window(demo_runs: DemoRuns) -> None:
    """``tally demo`` (what ``make demo`` runs): the session's shared run of the default scenario."""
    (run,) = demo_runs.get("window")
    directory, summary = run.directory, run.summary
    assert summary["ok"] and summary["bundle_audit"]
    (only,) = summary["windows"]
    assert only["ending"] == "restored" and only["replay"] == "MATCH" and only["waves"] == 36
    assert summary["audit"]["protocol"]["ok"] and not summary["audit"]["protocol"]["violations"]
    assert (directory / "tally.db").exists() and (directory / "bundle" / "checkpoint.txt").exists()
    assert_same_shapes("window", directory / "tally.db")
    html = run.path(only["report"]).read_text()
    assert only["decision"] in html and "data:image/svg+xml;base64," in html
    assert (directory / ".tally-demo").is_file()  # the marker that lets the next demo refresh it
    audit = subprocess.run([TALLY, "audit", str(directory / "bundle")], capture_output=True, text=True)
    assert audit.returncode == 0 and "every invariant holds" in audit.stdout


@pytest.mark.parametrize(("scenario", "endings", "decisions"), [
    ("pp3", ["restored"], {"CANDIDATE", "NO_PROMOTION"}),
    ("chain", ["chained", "chained", "restored"], {"WIN", "LOSS", "NO_CHANGE", "INCONCLUSIVE"}),
    ("faults", ["restored"], {"INCONCLUSIVE"}),
])
def test_demo_scenarios(demo_runs: DemoRuns, scenario: str, endings: list[str], decisions: set[str]) -> None:
    (run,) = demo_runs.get(scenario)
    summary = run.summary
    assert summary["ok"], summary
    assert_same_shapes(scenario, run.directory / "tally.db")
    assert [w["ending"] for w in summary["windows"]] == endings
    assert all(w["decision"] in decisions and w["replay"] == "MATCH" for w in summary["windows"])
    if scenario == "faults":
        reasons = " ".join(summary["windows"][0]["reasons"])
        assert "thermal dial-back inside the HOLD" in reasons and "wave not counted" in reasons


def test_demo_looks_scenario_refuses_the_best_no_effect_window_and_promotes_a_real_effect(demo_runs: DemoRuns) -> None:
    """Equal arms in three chained windows, then another candidate with a real effect: the promotion gate counts
    the chain's three looks (not the other candidate's) and refuses its best; the effect is look 1 of 1, promoted."""
    (run,) = demo_runs.get("looks")
    summary = run.summary
    assert_same_shapes("looks", run.directory / "tally.db")
    assert [w["ending"] for w in summary["windows"]] == ["chained", "chained", "restored", "restored"]
    no_effect, effect = summary["promotion"]
    chain = [e for e in summary["windows"] if e["window"].startswith("looks-aa-")]
    assert no_effect["window"] in {e["window"] for e in chain} and no_effect["verdict"] == "NOT_PROMOTABLE"
    assert no_effect["looks"] == 3 and len(no_effect["seqs"]) == 3 and "looks.budget" in no_effect["failing"]
    assert effect["window"] == "looks-effect" and effect["looks"] == 1 and effect["index"] == 1
    assert effect["verdict"] == "PROMOTABLE", effect
    assert summary["ok"], summary
    assert (run.directory / "looks" / "bundle" / "events.jsonl").exists()


def test_tally_demo_ledger_scenario(demo_runs: DemoRuns) -> None:
    (run,) = demo_runs.get("ledger")
    assert run.proc.returncode == 0, run.proc.stderr
    assert "caught" in run.proc.stdout
    assert_same_shapes("ledger", run.directory / "tally.db")


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


def test_make_demo_twice_refreshes_the_demo_directory(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    for _ in range(2):  # the second run replaces the first one's directory instead of asking for --force
        proc = subprocess.run([TALLY, "demo", "--scenario", "ledger", "--dir", str(directory)], capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stderr
        (directory / "left-by-the-first-run").write_text("x")
    assert (directory / "tally.db").exists() and (directory / "left-by-the-first-run").exists()
    proc = subprocess.run([TALLY, "demo", "--scenario", "ledger", "--dir", str(directory), "-q"], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and not (directory / "left-by-the-first-run").exists()
    assert "1. init" not in proc.stdout  # -q: no step lines


def test_demo_refuses_a_directory_no_demo_made(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    proc = subprocess.run([TALLY, "demo", "--scenario", "ledger", "--dir", str(tmp_path / "mine")],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "was not made by tally demo" in proc.stderr
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_readme_scenarios_line_lists_every_scenario() -> None:
    from runner.app import DEMO_SCENARIOS

    readme = (REPO / "README.md").read_text()
    others = re.search(r"`tally demo --scenario ([\w|]+)` runs the other", readme)
    synopsis = re.search(r"^tally demo \[--dir DIR\] \[--scenario ([\w|]+)\]", readme, flags=re.M)
    assert others and synopsis
    assert set(others.group(1).split("|")) == set(DEMO_SCENARIOS) - {"window"}
    assert synopsis.group(1).split("|") == list(DEMO_SCENARIOS)


def test_readme_links_the_glossary_and_it_explains_the_readme_terms() -> None:
    readme = (REPO / "README.md").read_text()
    glossary = (REPO / "docs" / "glossary.md").read_text()
    assert "docs/glossary.md" in readme
    terms = [line.split("|")[1].strip() for line in glossary.splitlines() if line.startswith("| ") and "---" not in line]
    for word in ("PP4", "WIN2", "HOLD", "s1-P / s2-B / s3-P", "checklist_literal", "pair reserve", "MDE", "bar",
                 "guard", "reported only", "Q, HEAD", "ending", "MATCH"):
        assert any(word in term for term in terms), word


# --------------------------------------------------------------------------- the "Running a window" recipe


def recipe() -> str:
    """The README's "Running a window" shell block, verbatim."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Running a window"):]
    match = re.search(r"^```sh\n(.*?)^```$", section, flags=re.M | re.S)
    assert match, "no ```sh block under Running a window"
    return match.group(1)


def test_readme_recipe_defines_every_variable_it_uses() -> None:
    text = recipe()
    used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text))
    defined = set(re.findall(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", text, flags=re.M))
    defined |= set(re.findall(r"for\s+([A-Za-z_][A-Za-z0-9_]*)\s+in", text))
    assert used - defined - {"PWD", "PATH"} == set()
    for created in ("admission-receipt.json", "rng-receipt.json", "site.toml"):
        assert f"> {created}" in text  # made by a command the reader sees
    assert "--pair-reserve-s" in text and "PAIR_RESERVE_S=" in text


def test_sim_seed000_example_serves_the_plans_arms() -> None:
    """examples/sim-seed000.toml is what the demo's pair builder makes of seed 000's plans (no drift)."""
    import tomllib

    from runner.demo.scenarios import sim_config_for
    from runner.plan import read_plan_file

    plans = [read_plan_file(REPO / "examples" / f"{name}.toml").plan
             for name in ("seed000-production-policy", "seed000-controlled")]
    shipped = tomllib.loads((REPO / "examples" / "sim-seed000.toml").read_text())
    assert shipped == sim_config_for(plans, time_scale=shipped["time_scale"])


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_readme_recipe_runs_verbatim_and_replay_verdict_matches(tmp_path: Path) -> None:
    import os
    import signal

    script = tmp_path / "recipe.sh"
    script.write_text(recipe())
    # the simulator at 0.02 (the demo's own scale), not the reader's 0.03: the window's 85 minutes in under 2
    env = {**os.environ, "TMPDIR": str(tmp_path), "PORT": str(_free_port()), "SIM_TIME_SCALE": "0.02",
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(["bash", str(script)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:  # the recipe's own trap stops its simulator; a stuck run is stopped whole
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()
    assert proc.returncode == 0, out[-4000:]
    assert re.search(r"^MATCH\b", out, flags=re.M) or "replay verdict my-first-window: MATCH" in out, out[-3000:]
    assert "ending restored" in out
    (work,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert (work / "report" / "report.html").is_file()
