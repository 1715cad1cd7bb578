"""The verdict tables at 80 and 200 columns: nothing cut (no ``…``), every line within the width, every
interval whole on one line; the demo's log lines wrap between words, never inside one."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from cli.verdict import print_result
from runner.decide import compute
from runner.demo.progress import DemoDisplay
from tests.report.cases import CASES

TALLY = str(Path(sys.executable).with_name("tally"))


def _render(name: str, width: int) -> tuple[dict, str]:
    data = CASES[name][0]()
    result = compute(data)
    console = Console(width=width, file=io.StringIO(), color_system=None)
    print_result(data, result, console)
    return result, console.file.getvalue()  # type: ignore[attr-defined]


def _intervals(result: dict) -> list[str]:
    if result["rule"] != "win2-v1":
        return []
    return [f"[{m['low']:+.2%}, {m['high']:+.2%}]" for cell in result["cells"].values()
            for m in cell["metrics"].values() if m["low"] is not None]


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("name", sorted(CASES))
def test_verdict_table_fits_the_terminal_with_no_cell_truncated(name: str, width: int) -> None:
    result, out = _render(name, width)
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= width
    for interval in _intervals(result):  # the interval is never cut or wrapped
        assert interval in out, interval
    assert f"Decision: {result['decision']}" in out


def test_at_80_columns_the_win2_table_goes_vertical_and_at_200_it_is_one_table() -> None:
    _, narrow = _render("win2_win", 80)
    _, wide = _render("win2_win", 200)
    assert "per repeat (s1, s2, s3 values" in narrow and "s1 per repeat" not in narrow
    assert "s1 per repeat" in wide and "per repeat (s1, s2, s3 values" not in wide
    assert not re.search(r"\d\.\d{3}e[+-]\d", narrow + wide)  # no e-notation


def test_verdict_compute_into_a_pipe_cuts_nothing(tmp_path: Path) -> None:
    import json

    source = tmp_path / "input.json"
    source.write_text(json.dumps(CASES["win2_win"][0]()))
    proc = subprocess.run([TALLY, "verdict", "compute", str(source)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout and "[+3.79%, +16.21%]" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 200


def test_demo_log_lines_never_break_mid_word() -> None:
    out = io.StringIO()
    line = ("  gate budget: PASS (PASS: total 80.8 min, measurement ends 68.8 min (333 s pair reserve); 85.2 min "
            "with the 600 s dry bound; fits while the measured pair reserve <= 588 s; hard 85 min)")
    with DemoDisplay(bar=True, out=out, width=80) as display:
        display.say(line)
    printed = [row.rstrip() for row in out.getvalue().splitlines() if row.strip()]
    assert len(printed) > 1 and all(len(row) <= 80 for row in printed)
    assert " ".join(row.strip() for row in printed) == " ".join(line.split())  # whole words on every row


def test_demo_display_folds_repeated_lines_and_verbose_shows_them() -> None:
    lines = ["start s1-P", *["  read_thermal s1: ok"] * 13, "start s2-B", *["  read_thermal s2: ok"] * 13,
             "\nstage restore: done"]
    for verbosity, expected in ((0, 1), (1, 13), (-1, 0)):
        out = io.StringIO()
        display = DemoDisplay(verbosity=verbosity, out=out)
        for text in lines:
            display.say(text)
        display.close()
        shown = out.getvalue()
        assert shown.splitlines().count("  read_thermal s1: ok") == expected
        if verbosity == 0:
            assert "(24 more routine line(s)" in shown and "-v shows every line" in shown
