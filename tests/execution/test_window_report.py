"""The window report shows what the events say beside the decision: every gate result, missing counters, repeats."""

from __future__ import annotations

from pathlib import Path

from runner.gates.admission import record_gate
from runner.plan.register import register_plan
from runner.report.window import window_report

from ..runner.script import SIMPLE_PP3
from .worlds import close, gate_all, run, window, world


def _shorter(text: str) -> str:
    return text.replace("max_tokens = 1024", "max_tokens = 48")


def test_the_report_shows_every_gate_and_a_banner_for_missing_counters(tmp_path: Path) -> None:
    w = world(tmp_path, [window(str(SIMPLE_PP3), "shown", edit=_shorter)], sim_config={"faults": {
        "metrics_down": True}})
    try:
        reg = register_plan(w.book, w.root, w.plans[0])
        failed = record_gate(w.book, w.root, "shown", "rehearsal", "FAIL", {"probes": []},
                             commit=reg.plan.commit, summary="FAIL: control (probe wrong for this server)")
        gate_all(w)  # the rehearsal passes on its second try
        passed = next(e for e in w.book.events(stream="window/shown", types=["gate.result"])
                      if e.payload["gate"] == "rehearsal" and e.payload["verdict"] == "PASS")
        assert run(w, "shown").ending == "restored"
        waves = sum(1 for _ in w.book.events(stream="window/shown", types=["wave.measured"]))
        paths = window_report(w.book, "shown", tmp_path / "report")
        text = Path(paths["markdown"]).read_text()
        assert "Gates (every result recorded for the window)" in text
        # the FAIL a later PASS superseded is shown as such, and not called to attention
        assert f"| rehearsal | - | FAIL, superseded by PASS at seq {passed.seq} | yes | {failed.event.seq} |" in text
        assert "FAILed" not in text
        assert f"server counters unavailable for {waves} of {waves} waves" in text
        starts = {e.payload["start"] for e in w.book.events(stream="window/shown", types=["gate.result"])
                  if e.payload["gate"] == "start_config"}
        assert starts == {"A1", "B1", "B2", "A2"} and text.count("| start_config |") == 4
        assert "| repeats | 1 |" in text
        assert "Contention and exclusivity (per start, over its waves)" in text
        assert "## Power this window had" in text  # the MDE beside the verdict, from its A1 and A2
        html = Path(paths["html"]).read_text()
        assert "superseded by PASS" in html and "FAILed" not in html  # both renderings say the same
    finally:
        close(w)


class _Event:
    """The members window_evidence reads (type, payload, seq)."""

    def __init__(self, seq: int, type_: str, payload: dict[str, object]) -> None:
        self.seq, self.type, self.payload = seq, type_, payload


def _wave(start: str, load: float, running: float, cpus: int = 2) -> _Event:
    """A complete wave.measured of the seed-003 example's ``start`` with the contention evidence given."""
    from runner.plan import load_plan
    from tests.runner.script import EXAMPLES, wave_payload

    plan = load_plan(EXAMPLES / "seed003-abba.toml")
    index = next(i for i, spec in enumerate(plan.waves) if spec.start == start)
    payload, _ = wave_payload(plan, index, "2026-11-01T00:00:00.000000Z", "2026-11-01T00:00:05.000000Z")
    payload.update({
        "window": plan.window_id, "plan_sha256": plan.sha256,
        "host_load": {"before": [load, 0.5, 0.5], "after": [load / 2, 0.5, 0.5], "cpus": cpus},
        "gauges": {"before": {"running": running, "waiting": 0.0, "kv_cache_usage": 0.25},
                   "after": {"running": 0.0, "waiting": 1.0, "kv_cache_usage": 0.5}, "series": {}}})
    return _Event(1, "wave.measured", payload)


def test_contention_evidence_is_shown_and_flagged(tmp_path: Path) -> None:
    from runner.plan import load_plan
    from runner.report.evidence import window_evidence
    from tests.runner.script import EXAMPLES

    plan = load_plan(EXAMPLES / "seed003-abba.toml")
    quiet = window_evidence(plan, [_wave("A1", 0.4, 0.0), _wave("A1", 0.6, 0.0)])
    assert quiet.contention == (("A1", "2", "0.20-0.60", "2", "0", "1", "50.0%"),)
    assert not [b for b in quiet.banners if "load" in b or "exclusive" in b]
    busy = window_evidence(plan, [_wave("A1", 0.4, 0.0), _wave("B1", 7.5, 3.0)])
    assert "host load average up to 7.50 on 2 CPUs during start B1: other work competed with the measurement" \
        in busy.banners
    assert "the server had 3 request(s) running before a wave of start B1: the drained host was not exclusive " \
           "to the window" in busy.banners
    assert not any("start A1" in b for b in busy.banners)


def test_a_fail_no_later_pass_superseded_is_called_to_attention() -> None:
    from runner.plan import load_plan
    from runner.report.evidence import window_evidence
    from tests.runner.script import EXAMPLES

    plan = load_plan(EXAMPLES / "seed003-abba.toml")

    def gate(seq: int, name: str, verdict: str, start: str | None = None) -> _Event:
        return _Event(seq, "gate.result", {"window": plan.window_id, "plan_sha256": plan.sha256, "gate": name,
                                           "verdict": verdict, "evidence": {}, "commit": plan.commit,
                                           "summary": verdict, **({"start": start} if start else {})})

    events = [gate(3, "power", "FAIL"), gate(4, "power", "PASS"), gate(5, "rng", "FAIL"),
              gate(6, "start_config", "FAIL", "A1"), gate(7, "start_config", "PASS", "B1"), _wave("A1", 0.4, 0.0)]
    found = window_evidence(plan, events)
    verdicts = {(row[0], row[1], row[4]): row[2] for row in found.gates}
    assert verdicts[("power", "-", "3")] == "FAIL, superseded by PASS at seq 4"
    assert verdicts[("rng", "-", "5")] == "FAIL"                 # never passed afterwards
    assert verdicts[("start_config", "A1", "6")] == "FAIL"       # another start's PASS supersedes nothing
    assert "2 gate result(s) FAILed: rng (seq 5), start_config A1 (seq 6)" in found.banners


def _reasoning_wave(start: str, reasoning: int, answer: int, first_answer_s: float | None) -> _Event:
    """A wave of ``start`` whose every request streamed reasoning apart (the members a reasoning server adds)."""
    event = _wave(start, 0.4, 0.0)
    requests = event.payload["requests"]
    assert isinstance(requests, list)
    for r in requests:
        r.update({"reasoning_tokens": reasoning, "answer_tokens": answer, "first_answer_s": first_answer_s})
    return event


def test_reasoning_and_answer_tokens_per_arm_are_a_diagnostic_only_where_streamed() -> None:
    from runner.plan import load_plan
    from runner.report.evidence import window_evidence
    from tests.runner.script import EXAMPLES

    plan = load_plan(EXAMPLES / "seed003-abba.toml")
    assert window_evidence(plan, [_wave("A1", 0.4, 0.0)]).reasoning == ()   # no reasoning streamed: no section
    assert not any("Reasoning" in s.title for s in window_evidence(plan, [_wave("A1", 0.4, 0.0)]).sections())
    found = window_evidence(plan, [_reasoning_wave("A1", 5, 7, 0.5), _reasoning_wave("B1", 3, 9, None)])
    a1, b1 = _wave("A1", 0.4, 0.0).payload["requests"], _wave("B1", 0.4, 0.0).payload["requests"]
    assert isinstance(a1, list) and isinstance(b1, list)
    a_arm, b_arm = (f"{arm.role} {arm.name}" for arm in plan.arms if arm.role in ("A", "B"))
    by_arm = {row[0]: row for row in found.reasoning}
    assert by_arm[a_arm][1:4] == (str(len(a1)), "5", "7") and by_arm[a_arm][5] == "500"
    assert by_arm[b_arm][1:4] == (str(len(b1)), "3", "9") and by_arm[b_arm][5] == "-"
    assert any(s.title == "Reasoning and answer tokens (per arm, diagnostic)" for s in found.sections())
