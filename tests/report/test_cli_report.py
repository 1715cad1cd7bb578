"""``tally verdict report INPUT.json --out DIR`` end to end (real files, real process exit codes)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from cli.app import app

from .cases import CASES

runner = CliRunner()


def test_verdict_report_writes_html_and_markdown(tmp_path: Path) -> None:
    source = tmp_path / "input.json"
    source.write_text(json.dumps(CASES["pp3_no_promotion_lower_bound"][0]()))
    out = tmp_path / "report"
    result = runner.invoke(app, ["verdict", "report", str(source), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["decision"] == "NO_PROMOTION"
    assert summary["html"] == str(out / "report.html")
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Decision: NO_PROMOTION (rule pp3-v1)" in html
    assert html.count('src="data:image/svg+xml;base64,') == 1
    head = (out / "report.md").read_text(encoding="utf-8").splitlines()
    assert head[0].startswith("# Keep production: no promotion (gain ")  # the decision in plain words first
    assert head[2] == "_tally verdict report: pp3-v1_"
    assert [Path(p).name for p in summary["figures"]] == ["pp3-bootstrap.svg"]


def test_verdict_report_refuses_a_file_as_out(tmp_path: Path) -> None:
    source = tmp_path / "input.json"
    source.write_text(json.dumps(CASES["pp3_reject"][0]()))
    blocker = tmp_path / "taken"
    blocker.write_text("")
    result = runner.invoke(app, ["verdict", "report", str(source), "--out", str(blocker)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"tally: --out {blocker}: exists and is not a directory"


def test_verdict_report_bad_input_writes_nothing(tmp_path: Path) -> None:
    data = CASES["win2_win"][0]()
    data["waves"][3]["rounds"] = -5
    source = tmp_path / "input.json"
    source.write_text(json.dumps(data))
    result = runner.invoke(app, ["verdict", "report", str(source), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert result.stderr == "tally: waves[3].rounds: must be >= 0, got -5\n"
    assert not (tmp_path / "r").exists()
