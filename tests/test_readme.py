"""The README's commands: `make demo` runs `tally demo`; its walkthrough does what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from runner.demo.ledger_tour import ledger_tour
from tests.ledger.independent_checker import check_events_jsonl

REPO = Path(__file__).resolve().parents[1]


def test_readme_starts_with_the_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"^make (\w+)$", readme, flags=re.M)
    assert commands[:2] == ["demo", "test"]
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:.*\n\t\$\(VENV\)/bin/tally demo$", makefile, flags=re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_ledger_tour_catches_its_tamper(tmp_path: Path) -> None:
    lines: list[str] = []
    result = ledger_tour(tmp_path / "tour", say=lines.append)
    assert result.events == 9
    assert (result.caught_seq, result.caught_rule) == (result.tampered_seq, 4)
    assert check_events_jsonl(result.bundle / "events.jsonl") == (9, result.verified_head)
    assert any("caught it" in line for line in lines)


def test_tally_demo_command(tmp_path: Path) -> None:
    tally = Path(sys.executable).with_name("tally")
    proc = subprocess.run([str(tally), "demo", "--scenario", "ledger", "--dir", str(tmp_path / "d")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "caught" in proc.stdout
    again = subprocess.run([str(tally), "demo", "--scenario", "ledger", "--dir", str(tmp_path / "d")],
                           capture_output=True, text=True)
    assert again.returncode == 2 and "not empty" in again.stderr
