"""``tally replay state --json`` prints the same bytes for the recorded ledgers, whatever the fold's inside.

The fixtures (``tests/fixtures/state_golden``, written by ``tests/runner/state_golden.py``
from the fold as it was before the read model was typed) hold every demo scenario's
ledger (window, chain, pp3, faults, power) and a window killed twice (SIGKILL with a host
action open, then its resume killed right after recording the crash) and resumed to its
end, with what ``replay state --json`` printed for each at several sizes (an open host
action, an interruption, after the HOLD, the first wave, the decision) and, at its end,
per window (``--window``). Folding the recorded events again must print them byte for byte:
old ledgers replay as recorded.
"""

from __future__ import annotations

import json

import pytest

from .state_golden import FIXTURES, printed, read_events, read_golden

NAMES = ("window", "chain", "pp3", "faults", "power", "crash")


@pytest.mark.parametrize("name", NAMES)
def test_replay_state_json_prints_the_recorded_bytes(name: str) -> None:
    events = read_events(name)
    golden = read_golden(name)
    assert golden and golden[-1]["size"] == len(events)
    for row in golden:
        got = printed(events[:row["size"]], row["window"])
        assert got == row["output"], f"{name} at size {row['size']} (window {row['window']}) prints other bytes"


def test_the_crash_ledger_pins_an_open_action_and_interruptions() -> None:
    """The crash fixture is what it says: an unknown outcome, then the recorded crash, then a resumed window."""
    rows = [json.loads(r["output"]) for r in read_golden("crash") if r["window"] is None]
    windows = [r["windows"]["crash-a"] for r in rows]
    assert any(w["open_actions"] and not w["interrupted"] for w in windows)      # killed mid-action
    assert any(w["interrupted"] for w in windows)                              # the resume recorded it
    assert windows[-1]["decision"] is not None and windows[-1]["ending"] == "restored"


def test_every_scenario_has_its_fixture() -> None:
    have = {p.name.split(".")[0] for p in FIXTURES.glob("*.events.jsonl.gz")}
    assert have == set(NAMES)


def test_the_golden_rows_are_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """``tally replay state --json`` prints ``print_json(replay_state(...))``: the bytes ``printed`` makes."""
    from cli.common import print_json
    from runner.state import fold

    events = read_events("window")[:50]
    print_json(fold(None, events).to_json(None))
    assert capsys.readouterr().out == printed(events)
