"""Scripted windows: the event sequences of docs/window.md, built through the catalogue.

``Script`` writes the events a correct runner would append (restoring window, chained
close, chain's last window, chain abort) as validated ``NewEvent``s. They can be
appended to a real ledger (``append_to``) or turned into in-memory ``Event``s with a
deterministic clock (``materialize``) so that crafted, broken variants can be audited
without a database. ``labels`` remembers the index of named steps for prefix tables.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ledger.canonical import canonical
from ledger.event import Event, format_time
from ledger.keys import Signer
from ledger.store import Blob, Ledger, NewEvent
from runner.events.catalogue import window_event
from runner.plan.model import Plan
from runner.plan.parse import read_plan_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SIMPLE_PP3 = Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "seed003-abba-simple.toml"
"""Seed 003's ABBA window in its simple shape (no bounded runs, priming, seed budget rules or smoke table),
the plan tests edit to add one of those alone (the example, examples/seed003-abba.toml, has them all)."""
SIMPLE_PP3_NAME = str(SIMPLE_PP3.with_suffix(""))  # for example_plan(name), which adds ".toml"
COMMIT = "c0ffee" + "0" * 34
BASE_TIME = datetime(2026, 11, 2, 6, 0, 0, tzinfo=UTC)
HOSTS = ("spark-a", "spark-b")


def example_plan(name: str, **overrides: Any) -> tuple[Plan, dict[str, bytes], bytes]:
    """An example plan (by file stem) with top-level overrides; returns (plan, family files, source)."""
    loaded = read_plan_file(EXAMPLES / f"{name}.toml", overrides={"commit": COMMIT, **overrides})
    return loaded.plan, dict(loaded.family_files), loaded.source


def wave_payload(plan: Plan, index: int, started_at: str, ended_at: str, rate: float = 1.0) -> tuple[dict[str, Any],
                                                                                                      Blob]:
    """A complete ``wave.measured`` payload (without window keys) and its records blob."""
    spec = plan.waves[index]
    n = len(spec.prompt_ids)
    tokens = plan.sampling.max_tokens
    requests = [{"index": i, "prompt_id": pid, "status": "ok", "delivered_tokens": tokens, "decode_s": 5.0,
                 "ttft_s": 0.25, "round_ms_p95": 12.0, "finish_reason": "length", "reason": None}
                for i, pid in enumerate(spec.prompt_ids)]
    records = Blob(("\n".join(json.dumps(r, sort_keys=True) for r in requests) + "\n").encode(),
                   "application/x-ndjson")
    rounds = 120 * n
    payload = {
        "start": spec.start, "cell": spec.cell, "repeat": spec.repeat, "wave": spec.wave, "family": spec.family,
        "seed": spec.seed, "max_tokens": spec.max_tokens, "concurrency": spec.concurrency,
        "started_at": started_at, "ended_at": ended_at,
        "counters": {"rounds": rounds, "accepted": int(rounds * 2.9 * rate), "draft_tokens": rounds * 5,
                     "accepted_per_pos": [rounds, rounds // 2, rounds // 4, rounds // 8, rounds // 16],
                     "decode_s": 5.0 * n, "generation_tokens": tokens * n},
        "counters_missing": [], "complete": True, "incomplete_reasons": [],
        "client": {"requests": n, "ok": n, "failed": 0, "timed_out": 0, "cancelled": 0, "censored": 0,
                   "delivered_tokens": tokens * n, "tokens_after_first": (tokens - 1) * n, "decode_s": 5.0 * n,
                   "decode_tps": (tokens - 1) / 5.0, "ttft_s": [0.25] * n,
                   "chunk_interval_ms": {"p50": 10.0, "p95": 12.0, "p99": 14.0}, "tokens_per_chunk": 3.9},
        "requests": requests,
        "records": records.ref(),
    }
    return payload, records


class Script:
    """Builds the events of one or more windows, in order."""

    def __init__(self, *, clock: datetime = BASE_TIME, step: timedelta = timedelta(seconds=1)) -> None:
        self.items: list[NewEvent] = []
        self.labels: dict[str, int] = {}
        self.clock = clock
        self.step = step
        self._ids = 0

    # ------------------------------------------------------------------ basics

    def now(self) -> str:
        """The time the next event will carry when materialized (client times follow it)."""
        return format_time(self.clock + self.step * (len(self.items) + 1))

    def label(self, name: str) -> None:
        """Name the last event (its 0-based index among the script's events)."""
        self.labels[name] = len(self.items) - 1

    def add(self, plan: Plan, type_: str, payload: dict[str, Any], blobs: Sequence[Blob] = ()) -> None:
        self.items.append(window_event(plan.window_id, plan.sha256, type_, payload, blobs))

    def action(self, plan: Plan, action: str, host: str = HOSTS[0], ok: bool = True) -> None:
        self._ids += 1
        action_id = f"{plan.window_id}-{self._ids}"
        self.add(plan, "host.action", {"host": host, "action": action, "phase": "started", "action_id": action_id,
                                       "command": f"{action} {host}"})
        self.add(plan, "host.action", {"host": host, "action": action, "phase": "finished", "action_id": action_id,
                                       "exit_code": 0 if ok else 1, "ok": ok, "duration_s": 0.5})

    # ------------------------------------------------------------------ phases

    def register(self, plan: Plan, families: dict[str, bytes], source: bytes) -> None:
        src = Blob(source, "application/toml")
        fam = {name: Blob(data, "application/x-ndjson") for name, data in families.items()}
        self.add(plan, "window.registered", {"plan": plan.to_json(), "source": src.ref(),
                                             "family_files": {k: b.ref() for k, b in fam.items()}},
                 [src, *fam.values()])
        self.label(f"{plan.window_id}:registered")

    def gate(self, plan: Plan, gate: str, verdict: str = "PASS", start: str | None = None) -> None:
        payload: dict[str, Any] = {"gate": gate, "verdict": verdict, "evidence": {"scripted": True},
                                   "commit": plan.commit, "summary": f"{verdict}: scripted"}
        if start is not None:
            payload["start"] = start
        self.add(plan, "gate.result", payload)

    def admit(self, plan: Plan, under_marker: bool = False) -> None:
        gates = list(plan.required_gates) + (["chain_prev_ok"] if under_marker else [])
        for gate in gates:
            self.gate(plan, gate)
        first = len(self.items) - len(gates) + 1
        self.add(plan, "window.admitted", {"commit": plan.commit, "under_marker": under_marker,
                                           "gates": {g: first + i for i, g in enumerate(gates)}})
        self.label(f"{plan.window_id}:admitted")

    def open_hold(self, plan: Plan, from_marker: str | None = None) -> None:
        self.action(plan, "preflight")
        if from_marker is None:
            for host in HOSTS:
                self.action(plan, "drain", host)
            self.label(f"{plan.window_id}:drained")
            self.add(plan, "production.state", {"state": "down", "proof": {"drain": "ok"}})
            self.label(f"{plan.window_id}:production-down")
        self.add(plan, "hold.opened", {"owner": plan.window_id, "hosts": list(HOSTS),
                                       "from_marker": from_marker is not None})
        self.label(f"{plan.window_id}:hold-opened")
        self.add(plan, "production.snapshot", {"sha256": from_marker or hashlib.sha256(b"production").hexdigest(),
                                               "source": "marker" if from_marker else "drain"})

    def measure(self, plan: Plan, *, rate_b: float = 1.05, cap: int | None = 2300) -> None:
        for start in plan.starts:
            arm = plan.arm(start.role)
            self.action(plan, "start_arm")
            self.add(plan, "start.began", {"start": start.id, "role": start.role, "clock_cap_mhz": cap,
                                           "spec_config_sha256": arm.speculative_sha256,
                                           "config_digest": arm.config_digest})
            self.label(f"{plan.window_id}:{start.id}:began")
            self.gate(plan, "standard_spec", start=start.id)
            self.add(plan, "warmup.done", {"start": start.id, "cold_ttft_s": 1.2, "warm_ttft_s": 0.3, "requests": 2})
            if plan.priming is not None:  # the plan registers prefix priming: the block primes before its waves
                self.add(plan, "priming.done", {"start": start.id, "cache_salt": f"tally-prime-{start.id}", "ok": True,
                                                "requests": []})
            for spec in plan.waves_of(start.id):
                t0 = self.now()
                payload, blob = wave_payload(plan, spec.index, t0, t0, rate_b if start.role == "B" else 1.0)
                self.add(plan, "wave.measured", payload, [blob])
            self.action(plan, "stop_arm")
            self.add(plan, "start.ended", {"start": start.id, "role": start.role})
        self.add(plan, "measurement.ended", {"reason": "complete", "waves": len(plan.waves)})
        self.label(f"{plan.window_id}:measurement-ended")

    def restore(self, plan: Plan, *, end_chain: bool = False, ending: str = "restored") -> None:
        self.action(plan, "restore")
        self.add(plan, "restore.finished", {"status": "ok", "attempts": 1})
        self.label(f"{plan.window_id}:restore-finished")
        self.action(plan, "watch")
        self.add(plan, "watch.result", {"verdict": "PASS", "evidence": {"served": 20}})
        self.label(f"{plan.window_id}:watch-pass")
        if end_chain:
            for host in HOSTS:
                self.add(plan, "placeholder.down", {"host": host})
            self.add(plan, "chain.marker.cleared", {})
            self.label(f"{plan.window_id}:marker-cleared")
        self.add(plan, "production.state", {"state": "up", "proof": {"watch": "PASS"}})
        self.label(f"{plan.window_id}:production-up")
        if ending != "aborted":
            self.add(plan, "hold.closed", {"owner": plan.window_id})
            self.label(f"{plan.window_id}:hold-closed")
        self.add(plan, "window.closed", {"ending": ending, "summary": ending})
        self.label(f"{plan.window_id}:closed")

    def chained_close(self, plan: Plan) -> None:
        for host in HOSTS:
            self.add(plan, "placeholder.up", {"host": host})
        self.label(f"{plan.window_id}:placeholders-up")
        for host in HOSTS:
            self.action(plan, "fence", host)
        self.action(plan, "experiment_stop")
        self.action(plan, "quiet_proof")
        self.add(plan, "production.state", {"state": "down", "proof": {"quiet": True}})
        self.action(plan, "placeholder_proof")
        self.add(plan, "hold.closed", {"owner": plan.window_id})
        self.label(f"{plan.window_id}:hold-closed")
        self.add(plan, "chain.marker.set", {"production_snapshot_sha256": hashlib.sha256(b"production").hexdigest(),
                                            "hosts": list(HOSTS)})
        self.label(f"{plan.window_id}:marker-set")
        self.add(plan, "window.closed", {"ending": "chained", "summary": "CHAINED: production left down"})
        self.label(f"{plan.window_id}:closed")

    def decide(self, plan: Plan, decision: str = "WIN") -> None:
        self.add(plan, "decision.recorded", {"rule": plan.protocol, "params": plan.decision_params,
                                             "inputs_digest": hashlib.sha256(b"inputs").hexdigest(),
                                             "input": {"rule": plan.protocol},
                                             "result": {"rule": plan.protocol, "decision": decision,
                                                        "reasons": []}})
        self.label(f"{plan.window_id}:decided")

    # ------------------------------------------------------------------ whole windows

    def restoring_window(self, name: str = "seed000-production-policy", **overrides: Any) -> Plan:
        plan, families, source = example_plan(name, chain="none", **overrides)
        self.register(plan, families, source)
        self.admit(plan)
        self.open_hold(plan)
        self.measure(plan)
        self.restore(plan)
        self.decide(plan)
        return plan

    def chain(self, count: int = 2) -> list[Plan]:
        """``count`` windows: chained, ..., then the chain's last (restores, clears the marker)."""
        plans = []
        marker: str | None = None
        for index in range(count):
            last = index == count - 1
            name = "seed000-controlled" if last else "seed000-production-policy"
            plan, families, source = example_plan(name, window_id=f"chain-{index + 1}",
                                                  chain="last" if last else "chained")
            self.register(plan, families, source)
            self.admit(plan, under_marker=marker is not None)
            self.open_hold(plan, from_marker=marker)
            self.measure(plan)
            if last:
                self.restore(plan, end_chain=True)
            else:
                self.chained_close(plan)
                marker = hashlib.sha256(b"production").hexdigest()
            self.decide(plan)
            plans.append(plan)
        return plans

    # ------------------------------------------------------------------ output

    def materialize(self, items: Sequence[NewEvent] | None = None, ledger_id: str = "ab" * 16) -> list[Event]:
        """In-memory events (hash chain of JCS bodies, no signatures) with a deterministic clock."""
        events = []
        prev = "0" * 64
        for seq, item in enumerate(self.items if items is None else items, 1):
            payload_json = canonical(item.payload).decode()
            time = format_time(self.clock + self.step * seq)
            event = Event(ledger_id, seq, prev, item.stream, item.type, time, "00" * 32, payload_json, "", "")
            digest = hashlib.sha256(event.body()).hexdigest()
            event = replace(event, hash=digest)
            events.append(event)
            prev = digest
        return events

    def append_to(self, ledger: Ledger, signer: Signer) -> list[Event]:
        """Append every scripted event to a real ledger (one transaction per event)."""
        return [ledger.append(item.stream, item.type, item.payload, signer, item.blobs) for item in self.items]


def edit(item: NewEvent, **changes: Any) -> NewEvent:
    """A copy of a scripted event with payload members changed (no validation)."""
    return NewEvent(item.stream, item.type, {**item.payload, **changes}, item.blobs)


def find(items: Sequence[NewEvent], type_: str, nth: int = 0, **match: Any) -> int:
    """Index of the nth scripted event of ``type_`` whose payload matches ``match``."""
    hits = [i for i, item in enumerate(items)
            if item.type == type_ and all(item.payload.get(k) == v for k, v in match.items())]
    return hits[nth]
