"""Quadratic plan parsing (the attack: 8,000 cells took 14 s, 40,000 cells 375 s): the work is linear in cells.

No clock here (times live in ``bench/plan.py``): the test counts the Python lines tally's
own code executes (``sys.settrace``) to parse a plan, take its digest and build its wave
schedule at 300 and 3,000 cells. Linear work grows ten times; the old set of names
rebuilt for every cell grew it a hundred times.
"""

from __future__ import annotations

import copy
import sys
import tomllib
from pathlib import Path
from types import FrameType
from typing import Any

from runner.plan.parse import parse_plan

REPO = Path(__file__).resolve().parents[2]
OWN = (str(REPO / "runner"), str(REPO / "ledger"))
BASE = tomllib.loads((REPO / "examples" / "seed000-controlled.toml").read_text())


def with_cells(count: int) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["cells"] = [{"name": f"cell-{i}", "context": "short", "concurrency": 1 + i % 4, "decision": i == 0}
                     for i in range(count)]
    return data


def lines_run(data: dict[str, Any]) -> int:
    """Lines of tally's code executed to parse ``data``, digest it, schedule it and look each cell up."""
    count = 0

    def tracer(frame: FrameType, event: str, _arg: Any) -> Any:
        nonlocal count
        if not frame.f_code.co_filename.startswith(OWN):
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        plan = parse_plan(data)
        assert len(plan.sha256) == 64
        for wave in plan.waves_of(plan.starts[0].id):
            plan.cell(wave.cell)
        parse_plan(plan.to_json(), path="registered plan")
    finally:
        sys.settrace(None)
    return count


def test_plan_parsing_is_linear_in_cells() -> None:
    small, large = lines_run(with_cells(300)), lines_run(with_cells(3_000))
    assert large < 11 * small, f"{large / small:.1f} times the work for 10 times the cells"
