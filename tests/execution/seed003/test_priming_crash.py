"""A runner killed right after a block's priming resumes into that block's waves under the recorded salt."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from runner.audit.full import run_audit

from ..test_crash import _crash_and_resume
from ..worlds import close, gate_all
from . import WINDOW, faithful_world


def _short_runs(text: str) -> str:
    return text.replace("decode_bound_s = 30.0", "decode_bound_s = 6.0")


def test_killed_after_priming_resumes_under_the_recorded_salt(tmp_path: Path) -> None:
    w = faithful_world(tmp_path, edit=_short_runs)
    try:
        gate_all(w)
        _crash_and_resume(w, WINDOW, "priming.done:1")
        events = list(w.book.events(stream=f"window/{WINDOW}"))
        primed = [e.payload for e in events if e.type == "priming.done"]
        assert [p["start"] for p in primed] == ["A1", "B1", "B2", "A2"]  # A1 was not primed again
        waves = Counter((e.payload["start"], e.payload["cell"], e.payload["wave"]) for e in events
                        if e.type == "wave.measured")
        assert len(waves) == 24 and set(waves.values()) == {1}
        a1_salt = primed[0]["cache_salt"]
        a1_runs = [t for t in w.sim.truth()["requests"] if t["cache_salt"] == a1_salt and t["max_tokens"] == 8192]
        assert len(a1_runs) == 6 and all(t["cached_tokens"] > 0 for t in a1_runs)
        assert any(e.type == "window.interrupted" for e in events)
        audit = run_audit(book=w.book)
        assert audit.ok, audit.lines()
    finally:
        close(w)
