"""Pressure aborts: a plan's ``[pressure]`` limits checked on every wave; crossing one ends the window safely."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ledger.errors import FieldError, PolicyError
from runner.audit.full import run_audit
from runner.decide.inputs import replay_window
from runner.events import payloads as p
from runner.execution.fit import recorded_fields, unfit
from runner.execution.pressure import crossings
from runner.plan import Pressure, parse_plan, registered_plan
from runner.state.causes import ending_causes

from ..runner.script import SIMPLE_PP3
from .worlds import close, gate_all, run, small, state, window, world

WINDOW = "pressure"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _with(limits: str) -> Any:
    return lambda text: small(text) + f"\n[pressure]\n{limits}\n"


def _events(w: Any, type_: str) -> list[dict[str, Any]]:
    return [e.payload for e in w.book.events(stream=f"window/{WINDOW}", types=[type_])]


def _backlog_at(w: Any, wave_label: str, **backlog: Any) -> Any:
    """An on_wave hook: after the wave named ``wave_label``, the next /metrics scrape (the following wave's
    before-scrape) shows another tenant's backlog."""
    def on_wave(_n: int, _total: int, label: str) -> None:
        if label == wave_label:
            w.sim.set_faults(backlog={"count": 1, **backlog})
    return on_wave


def test_waiting_requests_over_the_limit_end_the_window_safely_and_named(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=_with("max_waiting = 4"))])
    try:
        gate_all(w)
        said: list[str] = []
        result = run(w, WINDOW, on_wave=_backlog_at(w, "s1 short-b1 wave 2", waiting=9), say=said.append)
        crossed = _events(w, "pressure.crossed")
        assert [(c["start"], c["cell"], c["wave"]) for c in crossed] == [("s1", "short-b1", 3)]
        assert crossed[0]["crossed"] == ["waiting 9 before the wave, over the limit 4"]
        assert crossed[0]["limits"] == {"max_waiting": 4}
        waves = _events(w, "wave.measured")
        assert len(waves) == 3                       # measuring stopped at the wave that crossed
        assert _events(w, "measurement.ended")[0]["reason"] == "pressure"
        ended = _events(w, "start.ended")[0]
        assert ended["truncated"] and "pressure: s1 short-b1 wave 3: waiting 9" in ended["reason"]
        assert result.ending == "restored"           # production back, the HOLD closed
        s = state(w.book)
        assert s.production == "up" and s.hold is None
        decision = _events(w, "decision.recorded")[0]["result"]
        assert decision["decision"] == "INCONCLUSIVE"
        assert "pressure: s1 short-b1 wave 3: waiting 9 before the wave, over the limit 4" in decision["reasons"]
        assert any(line.startswith("pressure: s1 short-b1 wave 3") for line in said)
        causes = ending_causes(w.book.events(stream=f"window/{WINDOW}"))
        assert "pressure at s1 short-b1 wave 3: waiting 9 before the wave, over the limit 4" in causes
        assert "measurement ended: a wave crossed the plan's pressure limits, after 3 wave(s)" in causes
        assert replay_window(w.book, WINDOW).match and run_audit(book=w.book).ok
    finally:
        close(w)


def test_a_window_under_its_limits_measures_everything(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none",
                                edit=_with("max_waiting = 4\nmax_kv_cache_usage = 0.99\nmax_failed_share = 0.5"))])
    try:
        gate_all(w)   # a backlog of 4 is at the limit, not over it
        result = run(w, WINDOW, on_wave=_backlog_at(w, "s1 short-b1 wave 2", waiting=4))
        assert result.ending == "restored" and not _events(w, "pressure.crossed")
        assert _events(w, "measurement.ended")[0]["reason"] == "complete"
        assert "pressure" not in state(w.book).window(WINDOW).to_json()   # nothing recorded: the JSON is as before
    finally:
        close(w)


def test_failed_requests_over_the_share_cross_the_limit(tmp_path: Path) -> None:
    w = world(tmp_path, [window("seed000-controlled.toml", WINDOW, chain="none", edit=_with("max_failed_share = 0"))])
    try:
        gate_all(w)

        def on_wave(_n: int, _total: int, label: str) -> None:
            if label == "s1 short-b1 wave 1":
                w.sim.set_faults(http_5xx={"count": 1})
        result = run(w, WINDOW, on_wave=on_wave)
        crossed = _events(w, "pressure.crossed")
        assert [c["wave"] for c in crossed] == [2]
        assert crossed[0]["crossed"][0].startswith("1 of ") and "failed or timed out" in crossed[0]["crossed"][0]
        assert result.ending == "restored"
        assert _events(w, "decision.recorded")[0]["result"]["decision"] == "INCONCLUSIVE"
    finally:
        close(w)


def _wave(before: p.ServerGauges | None, after: p.ServerGauges | None, *, requests: int = 4,
          failed: int = 0, timed_out: int = 0) -> Any:
    client = type("Client", (), {"requests": requests, "failed": failed, "timed_out": timed_out})()
    gauges = p.WaveGauges(before=before, after=after)
    return type("Wave", (), {"gauges": gauges, "client": client})()


def test_what_counts_as_crossed() -> None:
    quiet = p.ServerGauges(running=0, waiting=0, kv_cache_usage=0.1)
    full = p.ServerGauges(running=2, waiting=1, kv_cache_usage=0.97)
    limits = Pressure(max_waiting=0, max_kv_cache_usage=0.95, max_failed_share=0.25)
    assert crossings(limits, _wave(quiet, quiet)) == []
    assert crossings(limits, _wave(quiet, full)) == ["waiting 1 after the wave, over the limit 0",
                                                     "kv_cache_usage 0.97 after the wave, over the limit 0.95"]
    # a gauge a limit needs that was not read cannot be shown under the limit
    assert crossings(Pressure(max_waiting=3), _wave(None, quiet)) == ["waiting not read before the wave (limit 3)"]
    unread = p.ServerGauges(running=0, waiting=None, kv_cache_usage=None)
    assert crossings(Pressure(max_kv_cache_usage=0.5), _wave(unread, unread)) == [
        "kv_cache_usage not read before or after the wave (limit 0.5)"]
    assert crossings(Pressure(max_waiting=3), _wave(unread, quiet)) == ["waiting not read before the wave (limit 3)"]
    # failures: failed and timed-out requests over the share (a share equal to the limit is not over it)
    assert crossings(Pressure(max_failed_share=0.25), _wave(quiet, quiet, failed=1)) == []
    assert crossings(Pressure(max_failed_share=0.25), _wave(quiet, quiet, failed=1, timed_out=1)) == [
        "2 of 4 requests failed or timed out (50%), over the limit 25%"]
    assert crossings(Pressure(max_failed_share=0.0), _wave(None, None, requests=0)) == []


def _plan(extra: str) -> Any:
    text = (EXAMPLES / "seed000-controlled.toml").read_text() + extra
    return parse_plan(tomllib.loads(text))


def test_the_pressure_table_is_validated_and_old_plans_keep_their_digest() -> None:
    plain = _plan("")
    assert plain.pressure is None and "pressure" not in plain.to_json()
    limited = _plan("\n[pressure]\nmax_waiting = 8\nmax_kv_cache_usage = 0.9\n")
    assert limited.pressure == Pressure(max_waiting=8, max_kv_cache_usage=0.9)
    assert limited.to_json()["pressure"] == {"max_waiting": 8, "max_kv_cache_usage": 0.9}
    assert limited.sha256 != plain.sha256
    assert dataclasses.replace(limited, pressure=None).sha256 == plain.sha256
    for table, message in (("", "registers no limit"), ("max_kv_cache_usage = 0", "max_kv_cache_usage"),
                           ("max_failed_share = 1", "max_failed_share"), ("max_waiting = -1", "max_waiting"),
                           ("max_wating = 3", "max_wating")):
        with pytest.raises(FieldError, match=message):
            _plan(f"\n[pressure]\n{table}\n")


def test_a_limit_on_a_gauge_the_server_does_not_expose_is_refused_before_any_host_action(tmp_path: Path) -> None:
    """A server whose /metrics has no KV-cache usage series (the simulator's llama.cpp exposition): a plan limiting
    it is refused at fit, before any host action."""
    def edit(text: str) -> str:
        return text.replace("max_tokens = 1024", "max_tokens = 32") + "\n[pressure]\nmax_kv_cache_usage = 0.9\n"

    w = world(tmp_path, [window(str(SIMPLE_PP3), WINDOW, edit=edit)], sim_config={"metrics_format": "llamacpp"})
    try:
        gate_all(w)
        plan = registered_plan(w.book, WINDOW).plan
        refusals = unfit(plan, w.driver, fields=recorded_fields(w.book, WINDOW))
        assert any(r.startswith("the plan's [pressure] limits read the kv_cache_usage gauge, and ")
                   and "exposes no series a vLLM source reads it from (vllm:kv_cache_usage_perc" in r
                   for r in refusals), refusals
        with pytest.raises(PolicyError, match=r"\[pressure\]"):
            run(w, WINDOW)
        assert not _events(w, "host.action") and not _events(w, "hold.opened")
    finally:
        close(w)
