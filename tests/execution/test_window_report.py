"""The window report shows what the events say beside the decision: every gate result, missing counters, repeats."""

from __future__ import annotations

from pathlib import Path

from runner.gates.admission import record_gate
from runner.plan.register import register_plan
from runner.report.window import window_report

from .worlds import close, gate_all, run, window, world


def _shorter(text: str) -> str:
    return text.replace("max_tokens = 1024", "max_tokens = 48")


def test_the_report_shows_every_gate_and_a_banner_for_missing_counters(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed003-abba.toml", "shown", edit=_shorter)], sim_config={"faults": {
        "metrics_down": True}})
    try:
        reg = register_plan(w.book, w.root, w.plans[0])
        failed = record_gate(w.book, w.root, "shown", "rehearsal", "FAIL", {"probes": []},
                             commit=reg.plan.commit, summary="FAIL: control (probe wrong for this server)")
        gate_all(w)  # the rehearsal passes on its second try
        assert run(w, "shown").ending == "restored"
        waves = sum(1 for _ in w.book.events(stream="window/shown", types=["wave.measured"]))
        paths = window_report(w.book, "shown", tmp_path / "report")
        text = Path(paths["markdown"]).read_text()
        assert "Gates (every result recorded for the window)" in text
        assert f"| rehearsal | - | FAIL | yes | {failed.event.seq} |" in text
        assert f"1 gate result(s) FAILed: rehearsal (seq {failed.event.seq})" in text
        assert f"server counters unavailable for {waves} of {waves} waves" in text
        starts = {e.payload["start"] for e in w.book.events(stream="window/shown", types=["gate.result"])
                  if e.payload["gate"] == "start_config"}
        assert starts == {"A1", "B1", "B2", "A2"} and text.count("| start_config |") == 4
        assert "| repeats | 1 |" in text
        html = Path(paths["html"]).read_text()
        assert "FAILed: rehearsal" in html  # both renderings say the same
    finally:
        close(w)
