"""State by replay: every prefix of a scripted chain folds to the state a hand-written table expects."""

from __future__ import annotations

import ast
import inspect
import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.event import Event
from runner.state import fold as fold_module
from runner.state.fold import State, admission_blockers, fold
from runner.state.window import GateView

from .conftest import Site, tally
from .script import Script

# label -> (marker set by, HOLD owner, production, phase of chain-1, phase of chain-2, placeholders up)
TABLE = [
    ("chain-1:registered", None, None, "unknown", "registered", None, 0),
    ("chain-1:admitted", None, None, "unknown", "admitted", None, 0),
    ("chain-1:drained", None, None, "unknown", "admitted", None, 0),
    ("chain-1:production-down", None, None, "down", "admitted", None, 0),
    ("chain-1:hold-opened", None, "chain-1", "down", "holding", None, 0),
    ("chain-1:s1:began", None, "chain-1", "down", "measuring", None, 0),
    ("chain-1:s3:began", None, "chain-1", "down", "measuring", None, 0),
    ("chain-1:measurement-ended", None, "chain-1", "down", "measurement_ended", None, 0),
    ("chain-1:placeholders-up", None, "chain-1", "down", "closing", None, 2),
    ("chain-1:hold-closed", None, None, "down", "closing", None, 2),
    ("chain-1:marker-set", "chain-1", None, "down", "closing", None, 2),
    ("chain-1:closed", "chain-1", None, "down", "chained", None, 2),
    ("chain-1:decided", "chain-1", None, "down", "decided", None, 2),
    ("chain-2:registered", "chain-1", None, "down", "decided", "registered", 2),
    ("chain-2:admitted", "chain-1", None, "down", "decided", "admitted", 2),
    ("chain-2:hold-opened", "chain-1", "chain-2", "down", "decided", "holding", 2),
    ("chain-2:s2:began", "chain-1", "chain-2", "down", "decided", "measuring", 2),
    ("chain-2:measurement-ended", "chain-1", "chain-2", "down", "decided", "measurement_ended", 2),
    ("chain-2:restore-finished", "chain-1", "chain-2", "down", "decided", "closing", 2),
    ("chain-2:watch-pass", "chain-1", "chain-2", "down", "decided", "closing", 2),
    ("chain-2:marker-cleared", None, "chain-2", "down", "decided", "closing", 0),
    ("chain-2:production-up", None, "chain-2", "up", "decided", "closing", 0),
    ("chain-2:hold-closed", None, None, "up", "decided", "closing", 0),
    ("chain-2:closed", None, None, "up", "decided", "restored", 0),
    ("chain-2:decided", None, None, "up", "decided", "decided", 0),
]


def _row(state: State) -> tuple[object, ...]:
    w1, w2 = state.windows.get("chain-1"), state.windows.get("chain-2")
    return (
        None if state.marker is None else state.marker.window,
        None if state.hold is None else state.hold.owner,
        state.production,
        None if w1 is None else w1.phase,
        None if w2 is None else w2.phase,
        len(state.placeholders),
    )


@pytest.fixture
def chain_ledger(site: Site) -> tuple[Site, Script, list[Event]]:
    script = Script()
    script.chain(2)
    script.append_to(site.book, site.signer)
    return site, script, list(site.book.events())


def test_every_prefix_matches_the_table(chain_ledger: tuple[Site, Script, list[Event]]) -> None:
    _, script, events = chain_ledger
    offset = 2  # seq 1 is the genesis; the script's first event is seq 2
    assert [label for label, *_ in TABLE] == _table_order(script)
    for label, *expected in TABLE:
        seq = script.labels[label] + offset
        state = fold(None, events[:seq])
        assert state.size == seq and state.head == events[seq - 1].hash
        assert _row(state) == tuple(expected), label


def _table_order(script: Script) -> list[str]:
    wanted = {label for label, *_ in TABLE}
    return [label for label, _ in sorted(script.labels.items(), key=lambda kv: kv[1]) if label in wanted]


def test_incremental_fold_equals_full_fold_at_every_prefix(chain_ledger: tuple[Site, Script, list[Event]]) -> None:
    _, _, events = chain_ledger
    state = State.empty()
    for seq in range(1, len(events) + 1):
        before = json.dumps(state.to_json(), sort_keys=True)
        new = fold(state, events[seq - 1:seq])
        assert json.dumps(state.to_json(), sort_keys=True) == before, "fold changed its input state"
        assert new.to_json() == fold(None, events[:seq]).to_json()
        state = new


def test_replay_state_command(chain_ledger: tuple[Site, Script, list[Event]]) -> None:
    _, _, events = chain_ledger
    result = tally("replay", "state", "--json")
    assert result.code == 0, result.err
    data = json.loads(result.out)
    assert data == fold(None, events).to_json()
    assert set(data) == {"ledger", "chain", "hold", "production", "windows"}
    assert set(data["chain"]) == {"marker", "placeholders"}
    w1 = data["windows"]["chain-1"]
    assert {"phase", "gates", "starts", "restore", "watch", "decision"} <= set(w1)
    assert w1["phase"] == "decided" and w1["decision"]["result"] == "WIN" and w1["gates"]["budget"]["verdict"] == "PASS"
    assert w1["gates"]["standard_spec"]["verdict"] == "PASS" and set(w1["gates"]["standard_spec"]["starts"]) == {
        "s1", "s2", "s3"}
    assert w1["starts"]["s2"]["waves"]["short-b1"] == [1, 2, 3, 4, 5, 6] and w1["starts"]["s2"]["clock_cap_mhz"] == 2300
    only = json.loads(tally("replay", "state", "--window", "chain-2", "--json").out)
    assert list(only["windows"]) == ["chain-2"] and only["ledger"] == data["ledger"]
    text = tally("replay", "state")
    assert text.code == 0 and "window chain-2: decided" in text.out
    assert tally("replay", "state", "--window", "nope").code == 2


def test_open_host_action_is_an_unknown_outcome() -> None:
    script = Script()
    plan = script.restoring_window()
    events = script.materialize()
    # cut the ledger right after the first start_arm action started: the runner crashed mid-action
    cut = next(i for i, e in enumerate(events) if e.type == "host.action" and e.payload["action"] == "start_arm")
    state = fold(None, events[: cut + 1])
    open_actions = state.open_actions()
    assert [(window, a.action, a.seq) for window, a in open_actions] == [(plan.window_id, "start_arm", cut + 1)]
    assert state.windows[plan.window_id].to_json()["open_actions"][0]["action"] == "start_arm"
    assert fold(state, events[cut + 1: cut + 2]).open_actions() == []


def test_admission_needs_every_gate_at_the_plan_commit() -> None:
    script = Script()
    plan = script.restoring_window()
    events = script.materialize()
    registered = fold(None, events[:1])
    assert admission_blockers(registered, plan.window_id) == [f"{g}: no result" for g in plan.required_gates]
    gates = next(i for i, e in enumerate(events) if e.type == "window.admitted")
    assert admission_blockers(fold(None, events[:gates]), plan.window_id) == []
    late_fail = Script()
    late_fail.items = list(script.items[:gates])
    late_fail.gate(plan, "rng", "FAIL")
    assert admission_blockers(fold(None, late_fail.materialize()), plan.window_id)[0].startswith("rng: FAIL")
    other = Script()
    other.items = list(script.items[:gates])
    other.add(plan, "gate.result", {"gate": "budget", "verdict": "PASS", "evidence": {}, "commit": "ab" * 20})
    assert "not the plan's" in admission_blockers(fold(None, other.materialize()), plan.window_id)[0]


def test_fold_is_pure() -> None:
    """No I/O and no clock: the module imports neither, and the same events give the same state."""
    tree = ast.parse(inspect.getsource(fold_module))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
                for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])}
    assert not imported & {"time", "datetime", "os", "random", "socket", "sqlalchemy", "httpx", "pathlib"}
    script = Script()
    script.chain(2)
    events = script.materialize()
    assert fold(None, events).to_json() == fold(None, list(events)).to_json()


_EVENTS: list[Event] = []


def _events() -> list[Event]:
    if not _EVENTS:
        script = Script()
        script.chain(3)
        _EVENTS.extend(script.materialize())
    return _EVENTS


@given(st.lists(st.integers(min_value=0, max_value=1000), max_size=6))
def test_folding_in_pieces_equals_folding_at_once(cuts: list[int]) -> None:
    events = _events()
    points = sorted({min(c, len(events)) for c in cuts} | {0, len(events)})
    state: State | None = None
    snapshots = []
    for a, b in itertools.pairwise(points):
        state = fold(state, events[a:b])
        snapshots.append((b, state))
    assert state is not None and state.to_json() == fold(None, events).to_json()
    for b, snap in snapshots:  # earlier states were not changed by later folds
        assert snap.to_json() == fold(None, events[:b]).to_json()


def test_replay_folds_only_new_events(chain_ledger: tuple[Site, Script, list[Event]]) -> None:
    from runner.state.replay import replay

    site, _, events = chain_ledger
    half = fold(None, events[: len(events) // 2])
    seen: list[int] = []
    original = site.book.events

    def spy(after: int = 0, **kwargs: object) -> object:
        seen.append(after)
        return original(after, **kwargs)  # type: ignore[arg-type]

    site.book.events = spy  # type: ignore[method-assign,assignment]
    caught_up = replay(site.book, half)
    assert seen == [half.size] and caught_up.to_json() == fold(None, events).to_json()


def test_a_finished_re_probe_settles_the_unknown_outcome() -> None:
    script = Script()
    plan = script.restoring_window()
    items = script.items[: next(i for i, it in enumerate(script.items)
                                if it.type == "host.action" and it.payload["action"] == "start_arm") + 1]
    probe = Script()
    probe.items = list(items)
    lost = items[-1].payload["action_id"]
    for phase, extra in (("started", {}), ("finished", {"exit_code": 0, "ok": True, "duration_s": 0.2})):
        probe.add(plan, "host.action", {"host": "spark-a", "action": "read_arm_state", "phase": phase,
                                        "action_id": "probe-1", "probe_of": lost, **extra})
    events = probe.materialize()
    assert [a.action_id for _, a in fold(None, events[:-1]).open_actions()] == [lost, "probe-1"]
    assert fold(None, events).open_actions() == []


def test_prev_ok_must_come_after_the_current_marker() -> None:
    script = Script()
    script.chain(2)
    events = script.materialize()
    state = fold(None, events[: script.labels["chain-2:registered"] + 1])
    ws = state.windows["chain-2"]
    assert state.marker is not None and state.marker.window == "chain-1"
    passed = {gate: GateView(verdict="PASS", seq=state.size, commit=ws.commit, summary="") for gate in ws.required_gates}
    early = GateView(verdict="PASS", seq=2, commit=ws.commit, summary="")  # before the marker was set
    state = replace(state, windows={**state.windows, "chain-2": replace(ws, gates={**passed, "chain_prev_ok": early})})
    assert admission_blockers(state, "chain-2") == [
        f"chain_prev_ok: its result (seq 2) predates the marker (seq {state.marker.seq})"]
    later = replace(early, seq=state.size)
    state = replace(state, windows={**state.windows, "chain-2": replace(ws, gates={**passed, "chain_prev_ok": later})})
    assert admission_blockers(state, "chain-2") == []


_names = st.text(alphabet=st.sampled_from('ab1._-"\\:,{}é \u2028'), min_size=1, max_size=12)


@given(window=_names, start=_names, cell=_names, wave=st.integers(min_value=0, max_value=10**6),
       reason=st.text(max_size=30), extra=st.dictionaries(st.sampled_from(["aa", "start", "tt", "window", "zz"]),
                                                          st.one_of(st.integers(-9, 9), _names, st.just({"start": "x"})),
                                                          max_size=2))
def test_wave_fast_path_agrees_with_json(window: str, start: str, cell: str, wave: int, reason: str,
                                         extra: dict) -> None:
    """The fold reads four members of wave.measured without parsing it; it must agree with json.loads."""
    from ledger.canonical import canonical
    from runner.state.fold import _wave_keys

    payload = {"cell": cell, "client": {"requests": 0, "reason": reason}, "counters": {"rounds": None},
               "incomplete_reasons": [reason, '","start":"evil","started_at":"1","wave":9,"window":"w"}'],
               "requests": [{"start": "nested", "status": "ok"}], "seed": 43, "start": start,
               "started_at": "2026-11-02T06:00:00.000000Z", "wave": wave, "window": window}
    payload.update(extra)
    text = canonical(payload).decode()
    parsed = json.loads(text)
    fast = _wave_keys(text)
    if fast is not None:
        assert fast._asdict() == {k: parsed[k] for k in ("window", "start", "cell", "wave")}
    plain = all(c.isascii() and (c.isalnum() or c in "._-") for c in window + start + cell)
    if plain and not extra:
        assert fast is not None  # the fast path is taken for every well-formed payload
