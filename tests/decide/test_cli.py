"""``tally verdict compute INPUT.json [--json]``: exit 0 whatever the verdict, 2 for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.app import app
from runner.decide import compute

from .test_pp3_cases import candidate_input
from .test_win2_cases import _win_input, one_cell, rate_rep

runner = CliRunner()


def _file(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "input.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


@pytest.mark.parametrize("data", [_win_input(), one_cell([rate_rep(110), rate_rep(95), rate_rep(104)]),
                                  _win_input(thermal=2), candidate_input()],
                         ids=["win", "no_change", "inconclusive", "candidate"])
def test_compute_json_is_the_rule_result(tmp_path: Path, data: dict[str, Any]) -> None:
    result = runner.invoke(app, ["verdict", "compute", _file(tmp_path, data), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == compute(data)


def test_compute_table_win2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["verdict", "compute", _file(tmp_path, _win_input(thermal=1))])
    assert result.exit_code == 0  # INCONCLUSIVE is a computed verdict
    out = result.stdout
    assert "short-b1: WIN" in out
    assert "pooled_rate_tps (higher)" in out and "110 / 112.5 / 107.5" in out
    assert "+10.00% / +12.50% / +7.50%" in out and "[+3.79%, +16.21%]" in out
    assert "thermal dial-back inside the HOLD (1 event(s))" in out
    assert "checklist_literal (ms_per_round primary): INCONCLUSIVE" in out
    assert out.rstrip().endswith("Decision: INCONCLUSIVE")


def test_compute_table_pp3(tmp_path: Path) -> None:
    result = runner.invoke(app, ["verdict", "compute", _file(tmp_path, candidate_input())])
    assert result.exit_code == 0
    assert "f2/150k" in result.stdout and "102.6" in result.stdout and "+14.00%" in result.stdout
    assert "90% bootstrap lower bound +8.00%; 3 distinct values in 2000 resamples (seed 4103)" in result.stdout
    assert result.stdout.rstrip().endswith("Decision: CANDIDATE")


@pytest.mark.parametrize(("content", "message"), [
    ("{", "is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
    ('{"rule": "pp3-v1", "x": NaN}', "input is not valid JSON: NaN is not a JSON number"),
    ('{"rule": "win2-v1"}', "decision_cells: required"),
    ("[1, 2]", "input: expected an object"),
])
def test_compute_bad_input_exits_2_with_one_line(tmp_path: Path, content: str, message: str) -> None:
    result = runner.invoke(app, ["verdict", "compute", _file(tmp_path, content)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr


def test_compute_missing_file_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["verdict", "compute", str(tmp_path / "absent.json")])
    assert result.exit_code == 2
    assert "cannot read input" in result.stderr


def test_compute_from_stdin_in_a_real_process() -> None:
    """The installed entry point: stdin input, exit codes, no traceback."""
    tally = Path(sys.executable).with_name("tally")
    good = subprocess.run([str(tally), "verdict", "compute", "-", "--json"], input=json.dumps(candidate_input()),
                          capture_output=True, text=True, check=False)
    assert good.returncode == 0 and json.loads(good.stdout)["decision"] == "CANDIDATE"
    data = candidate_input()
    data["requests"][3]["status"] = "gone"
    bad = subprocess.run([str(tally), "verdict", "compute", "-"], input=json.dumps(data), capture_output=True,
                         text=True, check=False)
    assert bad.returncode == 2
    assert bad.stderr.startswith("tally: requests[3].status: expected one of ok, censored")
    assert "Traceback" not in bad.stderr
