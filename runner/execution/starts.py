"""The steps of a start: its engine, its clock cap, the standard_spec gate, its effective parameters
attested, warm-up, waves, its end.

A wave's deadlines are the plan's (window seconds, scaled by the site's time scale)
and never run past the budget's next cut (the restore point, the block limit): a
wave cut by the budget is followed, in the same transaction, by the budget decision
that cut it. A finished control start of a win2-v1 window goes to the archive.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ledger.errors import ExternalError
from ledger.store import Blob

from ..decide.win2 import pooled_values
from ..events import payloads as p
from ..events import read_payload
from ..plan.model import CONTROL_ROLE
from ..plan.register import family_prompts
from ..state.replay import replay
from ..vocabulary import ArmRole
from .clock import parse_time
from .pressure import crossings
from .recorder import Pending, Recorder, RunResult, StepHandler, plain

if TYPE_CHECKING:
    from ..drivers.base import ActionResult
    from ..measure.family import Prompt
    from ..measure.wave import WaveResult
    from ..state.fold import WindowState
    from .steps import Step, StepKind

__all__ = ["HANDLERS", "StartSteps", "block_began", "block_ended", "wave_payload"]


def block_began(ws: WindowState, start: str) -> datetime | None:
    """When the start's block began: its arm's start began (the start_arm action that started its
    engine; ledgers older than the fold's ``started_time``: when it finished), else its start.began.
    The fold keeps both (``WindowState.block_began``, the start's ``began_time``)."""
    info = ws.starts.get(start)
    began = ws.block_began.get(start) or (info.began_time if info else None)
    return parse_time(began) if began else None


def block_ended(ws: WindowState, start: str) -> datetime | None:
    """When the start ended (its start.ended), ``None`` while it runs."""
    info = ws.starts.get(start)
    ended = info.ended_time if info else None
    return parse_time(ended) if ended else None


def wave_payload(start: str, cell: str, repeat: int, wave: int, measured: WaveResult, records: Blob,
                 engine: dict[str, Any] | None = None) -> p.WaveMeasured:
    """The ``wave.measured`` payload of a measured wave (its records travel as ``records``).

    ``engine`` is the attestation of who served it (``{"before", "after"}``); a wave not
    served by its start's engine throughout is not complete.
    """
    s = measured.summary()
    client = dict(s["client"])
    intervals = client.pop("chunk_interval_ms")
    figures = {key: None if client.get(key) is None else p.ChunkIntervals(**client.pop(key))
               for key in ("token_itl_ms", "tpot_ms") if key in client}
    client.update(figures)
    reasons = list(s["incomplete_reasons"])
    attested: dict[str, Any] = {}
    if engine is not None:
        attested["engine"] = engine
        reasons += [f"not served by the start's engine {when} the wave: {'; '.join(seen['problems'])}"
                    for when, seen in engine.items() if not seen.get("ok")]
    return p.WaveMeasured(
        start=start, cell=cell, repeat=repeat, wave=wave, family=s["family"], seed=s["seed"],
        max_tokens=s["max_tokens"], concurrency=s["concurrency"], started_at=s["started_at"], ended_at=s["ended_at"],
        counters=p.Counters(**s["counters"]), counters_missing=s["counters_missing"], complete=not reasons,
        incomplete_reasons=reasons,
        client=p.ClientFigures(chunk_interval_ms=None if intervals is None else p.ChunkIntervals(**intervals),
                               **client),
        requests=[p.RequestSummary(**r) for r in s["requests"]], records=p.BlobRef.of(records),
        counter_source=p.CounterSourceInfo(**s["counter_source"]), gauges=_gauges(s["gauges"]),
        host_load=p.HostLoad(**s["host_load"]), **attested,
        counters_by_url=[u.to_json() for u in measured.per_url] or None)


def _gauges(gauges: dict[str, Any]) -> p.WaveGauges:
    return p.WaveGauges(**{when: None if gauges[when] is None else p.ServerGauges(**gauges[when])
                           for when in ("before", "after")}, series=gauges["series"])


def _said(value: Any) -> str | int | None:
    """A fact a probe reported, as a record can quote it: a short printable string or a safe integer,
    else its repr, cut."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53):
        return value
    if isinstance(value, str) and len(value) <= 200 and value.isprintable():
        return value
    return repr(value)[:200]


ATTEST_TIMEOUT_S = 10.0   # each of a start's reads of what its server reports (its endpoints, its counters)
READ_ONLY_ACTIONS = frozenset({"read_thermal"})  # host actions that read the host and change nothing on it


class StartSteps(Recorder):
    prompts: dict[str, dict[str, Prompt]] | None
    model: str | None
    last_wave_end: float | None
    last_attested: tuple[str, int, dict[str, Any]] | None  # (start, seq of the wave's last event, attestation)

    def _elapsed_min(self, now: datetime) -> float:
        first = self.ws.clock.first_action
        return self.clock.minutes(parse_time(first) if first else None, now)

    def _now(self) -> datetime:
        """The budget's now: the ledger's clock, never before the window's last event (``BudgetClock.not_before``)."""
        return self.clock.not_before(self.ledger.now(), self.ws.clock.last)

    def start_arm(self, step: Step, _r: RunResult) -> None:
        assert step.start is not None
        self.say(f"start {self.plan.start(step.start).label}")
        self.model = None
        self.action("start_arm", None, self.arm_params(step.start), start=step.start)

    def _observed_spec(self, start_id: str) -> dict[str, Any] | None:
        """The speculative config the host reported when it started this start's engine."""
        engine = self.ws.engine
        config = engine.report("speculative_config") if engine is not None and engine.start == start_id else None
        return dict(config) if isinstance(config, dict) else None

    def start_began(self, step: Step, _r: RunResult) -> None:
        from ..gates.spec import spec_sha256

        assert step.start is not None
        start = self.plan.start(step.start)
        arm = self.plan.arm(start.role)
        reported = self._observed_spec(step.start)
        observed = reported if reported is not None else (arm.speculative or {})

        def began(facts: Mapping[str, Any] | None) -> list[Pending]:
            from ..gates.clocks import read_caps

            facts = facts or {}
            reading = read_caps(facts, self.driver.hosts) if clocks else None   # every host's own line
            clock = reading.to_json() if reading is not None and (reading.hosts or reading.problems) else None
            return [("start.began", p.StartBegan(
                start=start.id, role=start.role, clock_cap_mhz=reading.cap if reading is not None else None,
                clock=clock,
                spec_config_sha256=spec_sha256(observed), spec_config=plain(observed),
                config_digest=arm.config_digest,
                identity={"arm": arm.name, "log_line": facts.get("log_line"),
                          "spec_config_source": "host" if reported is not None else "declared (host reported none)"},
            ), ())]

        clocks = self.plan.production_clock_cap_mhz is not None
        if not clocks:  # no GPU clocks on this site: no cap to read
            self.append(began(None))
            return
        self.action("read_clock_cap", None, self.arm_params(step.start), start=step.start,
                    then=lambda res: began(res.facts))

    def config_gate(self, step: Step, _r: RunResult) -> None:
        """``start_config``: what the host reported starting is the arm the plan declares."""
        from ..gates.start_config import check_start_config
        from ..state.fold import ENGINE_REPORTS

        assert step.start is not None
        start = self.plan.start(step.start)
        arm = self.plan.arm(start.role)
        engine = self.ws.engine
        mine = engine is not None and engine.start == start.id
        reported = {k: engine.report(k) for k in ENGINE_REPORTS if engine is not None and mine and k in engine.reported}
        snapshot = self.snapshot_sha()
        production = self.snapshot_identity(snapshot) if snapshot and arm.role == "P" else None
        began = self.ws.starts.get(start.id)
        clock = [str(problem) for problem in began.clock_problems] if began else []
        checked = check_start_config(start.id, arm, reported, production, clock_problems=clock,
                                     reference=self._arm_reference(start.id, start.role),
                                     equal_identity=self.plan.equal_identity)
        self.append([("gate.result", p.GateResult(gate="start_config", verdict=checked.verdict,
                                                  evidence=dict(checked.evidence), summary=checked.summary,
                                                  commit=self.plan.commit, start=start.id), ())])
        self.say(f"  start_config {start.label}: {checked.verdict}" +
                 (f" ({checked.summary})" if checked.failures else ""))

    def _arm_reference(self, start_id: str, role: str) -> tuple[str, str, Any] | None:
        """The start every other start's engine is held equal to: the first start of the plan's first
        role that started (its id, role and the identity its host reported); None for that start itself
        (or before it started). Every other start is compared, so a role whose first start was lost
        before its gate is still compared at its next."""
        first_role = self.plan.starts[0].role
        reference = self.ws.first_identity.get(first_role)
        if reference is None or reference[0] == start_id:
            return None
        return reference[0], first_role, reference[1]

    def spec_gate(self, step: Step, _r: RunResult) -> None:
        from ..gates.spec import SpecResult, check_standard_spec

        assert step.start is not None
        start = self.plan.start(step.start)
        arm = self.plan.arm(start.role)
        observed = self._observed_spec(step.start)
        if observed is None:  # fail closed: what the host did not report cannot be checked
            checked = SpecResult("FAIL", {"start": start.id, "role": start.role, "config": None,
                                          "failures": ["the host reported no speculative config for this start"]},
                                 ("the host reported no speculative config for this start",))
        else:
            checked = check_standard_spec(start.id, start.role, observed, arm.speculative)
        self.append([("gate.result", p.GateResult(gate="standard_spec", verdict=checked.verdict,
                                                  evidence=dict(checked.evidence),
                                                  summary="; ".join(checked.failures) or "standard",
                                                  commit=self.plan.commit, start=start.id), ())])
        self.say(f"  standard_spec {start.label}: {checked.verdict}")

    def attest_params(self, step: Step, _r: RunResult) -> None:
        """The start's effective parameters, read back from its server's own endpoints and compared with the
        plan's (``params.attested``), before its warm-up: a block begins only on what was attested."""
        from ..gates.effective import check_effective
        from ..measure.served import read_served
        from ..measure.sources import counter_source

        assert step.start is not None
        start = self.plan.start(step.start)
        arm = self.plan.arm(start.role)
        urls = self.driver.metrics_urls if counter_source(self.driver.counter_source).scrapes else ()
        reported = read_served(self.driver.serving_url, urls, timeout_s=ATTEST_TIMEOUT_S)
        checked = check_effective(self.plan, arm, reported)
        self.append([("params.attested", p.ParamsAttested(
            start=start.id, ok=checked.ok, reported=reported, checks=list(checked.checks),
            failures=list(checked.failures), none_reported=checked.none_reported, required=self.plan.attest_required,
            sampling=self.plan.sampling.engine_fields), ())])
        said = ("the server reports none of them" if checked.none_reported
                else ", ".join(f"{c['param']} {c['reported']!r}" for c in checked.checks))
        self.say(f"  effective parameters {start.label}: {'attested' if checked.ok else 'NOT attested'} ({said})"
                 + (f": {'; '.join(checked.failures)}" if checked.failures else ""))

    def warmup(self, step: Step, _r: RunResult) -> None:
        """The site's warm-up, told the plan's engine-side sampling fields (``engine_sampling``), with the
        server's own served-requests counter read on either side of it (``warmup.done``'s ``served``)."""
        from ..gates.effective import check_warmup_served
        from ..measure.served import served_count

        assert step.start is not None
        start_id = step.start
        params = self.arm_params(start_id)
        if self.plan.sampling.engine_fields:
            params["engine_sampling"] = self.plan.sampling.engine_fields
        if self.plan.measurement.chat:   # the API the waves use, so the warm-up warms what they will ask
            params["endpoint"] = "chat"
        urls = tuple(self.driver.metrics_urls or ())
        source = self.driver.counter_source
        before, series, counts, problem = served_count(urls, source, timeout_s=ATTEST_TIMEOUT_S)

        def done(res: ActionResult) -> list[Pending]:
            said = res.facts.get("requests", 0)
            requests = said if isinstance(said, int) and not isinstance(said, bool) and 0 <= said < 2**31 else 0
            after, why = None, problem
            if before is not None:
                after, _, _, why = served_count(urls, source, timeout_s=ATTEST_TIMEOUT_S)
            checked = check_warmup_served(requests, before, after, counts, series, why,
                                          required=self.plan.attest_required)
            served = p.WarmupServed(attested=checked.attested, ok=checked.ok, detail=checked.detail, series=series,
                                    counts=counts, before=before, after=after)
            if not checked.ok:
                self.say(f"  warm-up {start_id}: {checked.detail}")
            return [("warmup.done", p.WarmupDone(start=start_id, cold_ttft_s=res.facts.get("ttft_cold_s"),
                                                 warm_ttft_s=res.facts.get("ttft_warm_s"), requests=requests,
                                                 served=served), ())]

        self.action("warmup", None, params, start=start_id, then=done)

    def prime(self, step: Step, result: RunResult) -> None:
        """Prefix priming (plan ``[priming]``): identical requests per prompt under the block's own cache_salt,
        their occupied token counts checked against the cells' declared sizes (``priming.done``)."""
        import uuid

        from ..measure.wave import measure_wave

        priming = self.plan.priming
        assert step.start is not None and priming is not None
        # every prompt of the block's waves once, in wave order (one wave per cell and family in pp3-v1)
        order = list({(w.cell, w.family, pid): (w, pid) for w in self.plan.waves_of(step.start)
                      for pid in w.prompt_ids}.values())
        prompts = [self._prompts_for(w.family)[pid] for w, pid in order for _ in range(priming.requests)]
        salt = f"tally-prime-{self.window}-{step.start}-{uuid.uuid4().hex[:16]}"  # fixed per block, fresh across
        scale = self.clock.time_scale
        sampling = self.plan.sampling
        now = self._now()
        began = block_began(self.ws, step.start)
        cut_s, _cut = self.clock.wave_cut_s(self._elapsed_min(now), self.clock.minutes(began, now) if began else None)
        t0 = time.perf_counter()
        measured = measure_wave(  # cut, as a wave, where the budget cuts (the next step records the limit)
            self.driver.serving_url, None, prompts, model=self._model_name(), max_tokens=priming.max_tokens,
            seed=sampling.seed_base, deadline_s=self.plan.measurement.request_deadline_s * scale,
            wave_deadline_s=max(min(self.plan.measurement.wave_deadline_s * scale * len(prompts), cut_s), 0.001),
            ignore_eos=sampling.ignore_eos, priority=sampling.priority, temperature=sampling.temperature,
            top_p=sampling.top_p, cancel=self.cancel, counter_source="none", chat=self.plan.measurement.chat,
            extra_body={**sampling.engine_fields, "cache_salt": salt})
        result.measuring_s += time.perf_counter() - t0
        result.load_s += measured.duration_s
        entries: list[p.PrimingRequest] = []
        failures: list[str] = []
        for index, record in enumerate(measured.requests):
            wave, pid = order[index // priming.requests]
            declared = self.plan.cell(wave.cell).tokens
            occupied = (record.usage or {}).get("prompt_tokens")
            where = f"{wave.family}/{wave.cell} ({pid})"
            if record.status != "ok":
                failures.append(f"{where} priming request {index % priming.requests + 1} is {record.status}: "
                                f"{record.reason}")
            elif occupied is None:
                failures.append(f"{where}: the server reported no usage.prompt_tokens")
            elif abs(occupied - declared) > priming.tolerance_tokens:
                failures.append(f"{where} occupies {occupied} tokens, the plan declares {declared}"
                                + (f" (tolerance {priming.tolerance_tokens})" if priming.tolerance_tokens else ""))
            entries.append(p.PrimingRequest(
                cell=wave.cell, family=wave.family, prompt_id=pid, repeat=index % priming.requests + 1,
                status=record.status, prompt_tokens=occupied, declared_tokens=declared, ttft_s=record.ttft_s,
                reason=record.reason))
        records = Blob(measured.records_jsonl(), "application/x-ndjson")
        unique = list(dict.fromkeys(failures))
        self.append([("priming.done", p.PrimingDone(start=step.start, cache_salt=salt, ok=not unique,
                                                    requests=entries, failures=unique,
                                                    records=p.BlobRef.of(records)), (records,))])
        self.say(f"  priming {step.start}: {len(entries)} request(s), "
                 + ("verified" if not unique else f"NOT verified: {'; '.join(unique)}"))

    def _prompts_for(self, family: str) -> dict[str, Prompt]:
        if self.prompts is None:
            self.prompts = family_prompts(self.ledger, self.registration)
        return self.prompts[family]

    def _model_name(self) -> str:
        if self.model is None:
            from ..measure.wave import list_models

            models = list_models(self.driver.serving_url)
            if not models:
                raise ExternalError(f"{self.driver.serving_url} lists no model")
            self.model = models[0]
        return self.model

    def attest(self, start_id: str) -> dict[str, Any]:
        """Which engine serves now, and whether it is this start's: the arm the plan declares for
        the start, and (where the site reports sessions) the very session its start_arm started."""
        from ..drivers.base import ActionResult

        expected = self.plan.arm(self.plan.start(start_id).role).name
        known = self.ws.engine
        try:
            res = self.driver.run("probe", None, {"window": self.window, "start": start_id})
        except ExternalError as exc:
            res = ActionResult("probe", None, False, None, 0.0, False, b"", b"", {"error": str(exc)})
        except Exception as exc:   # a probe that could not be read is a probe that failed
            res = ActionResult("probe", None, False, None, 0.0, False, b"", b"",
                               {"error": f"the driver raised {type(exc).__name__}: {str(exc)[:300]}"})
        # what the site said is quoted into the wave's record: bounded and recordable
        facts = {name: _said(res.facts.get(name)) for name in ("arm", "session", "engine", "serving", "error")}
        problems = [] if res.ok else [f"the probe failed: {facts.get('error') or res.exit_code}"]
        if facts.get("arm") != expected:
            problems.append(f"arm {facts.get('arm')!r} serves, not the start's {expected!r}")
        if facts.get("engine") not in (None, "ready"):
            problems.append(f"the engine is {facts.get('engine')}")
        session, started = facts.get("session"), known.session if known else None
        if session is not None and started is not None and session != started:
            problems.append(f"engine session {session} is not the one the start began ({started})")
        return {"arm": facts.get("arm"), "session": session, "engine": facts.get("engine"),
                "serving": facts.get("serving"), "ok": not problems, "problems": problems}

    def _attested_since_last_wave(self, start_id: str) -> dict[str, Any] | None:
        """The previous wave's closing attestation, when it still stands for this one's opening:
        the same start, and nothing appended since but this window's read-only host actions
        (the thermal watch's ``read_thermal`` and what it found). Every host action the runner
        takes is an event, so nothing else can have touched the host in between."""
        last, self.last_attested = self.last_attested, None
        if last is None or last[0] != start_id:
            return None
        since = self.ledger.events(last[1], batch=64)  # all() stops at the first other event
        read_only = all(e.stream == f"window/{self.window}" and (
            e.type == "thermal.event"
            or (e.type == "host.action" and read_payload(e, p.HostAction).action in READ_ONLY_ACTIONS))
            for e in since)
        return last[2] if read_only else None

    def thermal_watch(self, start_id: str) -> None:
        """Poll the site's THERMAL-WATCH (``read_thermal``) between waves: every dial-back an event.

        A dial-back that recovers before the start ends is caught here, where a reading of
        the clock at the start's end would see it recovered.
        """
        from ..gates.clocks import new_dial_backs

        if self.plan.production_clock_cap_mhz is None or "read_thermal" not in self.driver.actions:
            return
        began = self.ws.starts.get(start_id)
        cap = began.clock_cap_mhz if began else None
        recorded = self.ws.dial_backs_recorded  # folded from the window's thermal.event rows
        since = self.ws.clock.hold_opened

        def events(res: ActionResult) -> list[Pending]:
            return [("thermal.event", p.ThermalEvent(
                host=d["host"], kind="malformed" if "malformed" in d else "dial_back", clock_cap_mhz=d["clock_mhz"],
                at=d["at"],
                detail={"start": start_id, "start_cap_mhz": cap, "from_mhz": d["from_mhz"], "watch_seq": d["seq"],
                        "source": "read_thermal",
                        **({"watch_host": d["watch_host"], "reason": d["malformed"]} if "malformed" in d else {})}), ())
                for d in new_dial_backs(res.facts, cap, recorded, since=since if isinstance(since, str) else None,
                                        hosts=self.driver.hosts)]

        # read-only: its finished record goes with the step's next append (the wave's, or the next action's start)
        self.action("read_thermal", None, self.arm_params(start_id), start=start_id, then=events, hold=True)

    def _engine_lost(self, start_id: str, seen: dict[str, Any]) -> None:
        """Record a probe: the fold then knows the start's engine no longer serves."""
        self.say(f"  {start_id}: not its engine: {'; '.join(seen['problems'])}")
        self.action("probe", None, {"attested": "the start's engine", "start": start_id})

    def wave(self, step: Step, result: RunResult) -> None:
        from ..measure.wave import measure_wave

        wave = step.wave
        assert wave is not None and step.start is not None
        self.thermal_watch(step.start)
        before = self._attested_since_last_wave(step.start) or self.attest(step.start)
        if not before["ok"]:
            self._engine_lost(step.start, before)
            return
        family = self._prompts_for(wave.family)
        prompts = [family[pid] for pid in wave.prompt_ids]
        now = self._now()
        began = block_began(self.ws, step.start)
        block = self.clock.minutes(began, now) if began else None
        cut_s, cut = self.clock.wave_cut_s(self._elapsed_min(now), block)
        # Plan deadlines are in window seconds; the site's time scale makes them real ones.
        wave_deadline = self.plan.measurement.wave_deadline_s * self.clock.time_scale
        request_deadline = self.plan.measurement.request_deadline_s * self.clock.time_scale
        bound = self.plan.measurement.decode_bound_s
        deadline = min(wave_deadline, cut_s) if cut_s > 0 else 0.001
        sampling = self.plan.sampling
        t0 = time.perf_counter()
        if self.last_wave_end is not None:
            result.wave_gaps_s.append(t0 - self.last_wave_end)
        measured = measure_wave(
            self.driver.serving_url, self.driver.metrics_urls or None, prompts,
            model=self._model_name(), max_tokens=wave.max_tokens, seed=wave.seed, concurrency=wave.concurrency,
            deadline_s=request_deadline, wave_deadline_s=deadline, chat=self.plan.measurement.chat,
            ignore_eos=sampling.ignore_eos, priority=sampling.priority, family=wave.family,
            temperature=sampling.temperature, top_p=sampling.top_p, cancel=self.cancel,
            counter_source=self.driver.counter_source,
            speculative=self.plan.arm(self.plan.start(step.start).role).speculates,
            decode_bound_s=None if bound is None else bound * self.clock.time_scale,
            extra_body={**sampling.engine_fields, **(self._block_salt(step.start) or {})} or None,
            keep_token_ids=self.plan.measurement.keep_token_ids,
        )
        self.last_wave_end = time.perf_counter()
        spent = self.last_wave_end - t0
        result.measuring_s += spent
        result.load_s += measured.duration_s
        result.waves += 1
        after = self.attest(step.start)
        records = Blob(measured.records_jsonl(), "application/x-ndjson")
        payload = wave_payload(step.start, wave.cell, wave.repeat, wave.wave, measured, records,
                               {"before": before, "after": after})
        items: list[Pending] = [("wave.measured", payload, (records,))]
        limits = self.plan.pressure
        crossed = crossings(limits, payload) if limits is not None else []
        if limits is not None and crossed:   # recorded with the wave, in one append: never one without the other
            pressure = p.PressureCrossed(start=step.start, cell=wave.cell, wave=wave.wave, crossed=crossed,
                                         limits=limits.to_json())
            items.append(("pressure.crossed", pressure, ()))
            self.say(f"pressure: {pressure.line}")
        cut_by_budget = deadline < wave_deadline and spent >= deadline * 0.98
        if cut_by_budget and cut is not None and not self.cancel.is_set():
            items.append(("budget.decision", p.BudgetDecision(
                action=cut.action, reason=cut.reason, elapsed_min=round(self._elapsed_min(self._now()), 3),
                limit_min=cut.at_min, start=step.start if cut.action == "truncate_block" else None,
                cell=wave.cell), ()))
        stored = self.append(items)
        self.last_attested = (step.start, stored[-1].seq, after) if after["ok"] else None
        if not after["ok"]:
            self._engine_lost(step.start, after)
        if self.on_wave is not None:
            self.on_wave(self.ws.waves, len(self.plan.waves), f"{step.start} {wave.cell} wave {wave.wave}")

    def _block_salt(self, start_id: str) -> dict[str, str] | None:
        """The cache_salt a primed block's waves run under (``None``: a fresh salt per request)."""
        began = self.ws.starts.get(start_id)
        primed = began.priming if began else None
        return {"cache_salt": primed.cache_salt} if primed else None

    def budget(self, step: Step, _r: RunResult) -> None:
        limit = step.limit
        assert limit is not None
        self.append([("budget.decision", p.BudgetDecision(
            action=limit.action, reason=limit.reason, elapsed_min=round(self._elapsed_min(self._now()), 3),
            limit_min=limit.at_min, start=step.start), ())])
        self.say(f"budget: {limit.action}: {limit.reason}")

    def end_start(self, step: Step, _r: RunResult) -> None:
        assert step.start is not None
        self.last_wave_end = None  # the gap to the next start's first wave is host work, not overhead
        start = self.plan.start(step.start)
        info = self.ws.starts.get(start.id)
        lost = bool(step.args.get("lost"))
        failed = bool(step.args.get("failed"))
        if not lost and self.plan.production_clock_cap_mhz is not None:
            cap = info.clock_cap_mhz if info else None
            self.thermal_watch(start.id)

            def thermal(res: ActionResult) -> list[Pending]:
                current = res.facts.get("current_clock_mhz")
                if "read_thermal" in self.driver.actions:
                    return []   # the THERMAL-WATCH read just before recorded every dial-back
                if isinstance(current, int) and isinstance(cap, int) and current < cap:
                    return [("thermal.event", p.ThermalEvent(host="site", kind="dial_back", clock_cap_mhz=current,
                                                             detail={"start": start.id, "start_cap_mhz": cap}), ())]
                return []

            self.action("read_clock_cap", None, self.arm_params(start.id), start=start.id, then=thermal)

        def finish(ok: bool, reason: str) -> list[Pending]:
            ended = p.StartEnded(start=start.id, role=start.role, ok=ok,
                                 truncated=bool(step.args.get("truncated")), reason=reason)
            return [("start.ended", ended, ()), *self._archive_items(start.id, start.role)]

        if lost:
            self.append(finish(False, step.reason))
            return
        res = self.action("stop_arm", None, self.arm_params(start.id), start=start.id,
                          then=lambda _res: finish(not failed, step.reason))
        if not res.ok:
            self.append(finish(False, f"stop_arm failed: {res.facts.get('error') or res.exit_code}"))

    def _archive_items(self, start_id: str, role: ArmRole) -> list[Pending]:
        if role != CONTROL_ROLE.get(self.plan.mode) or self.plan.protocol != "win2-v1":
            return []
        from ..state.archive import production_commit

        items: list[Pending] = []
        # the state as of now: this step's own THERMAL-WATCH read may have recorded dial-backs
        ws = replay(self.ledger, self.state).windows[self.window]
        info = ws.starts.get(start_id)
        nominal = info.clock_cap_mhz if info else None
        # a dial-back during the start: archived at the real (lowest) clock and flagged
        dialled = ws.dial_back_caps.get(start_id, ())
        real = min([c for c in dialled if isinstance(c, int)], default=nominal)
        snapshot = self.snapshot_sha()
        commit = production_commit(self.snapshot_identity(snapshot)) if snapshot else None
        flag: dict[str, Any] = {"dial_back": True, "nominal_clock_cap_mhz": nominal} if dialled else {}
        for cell in self.plan.cells:
            if not cell.decision:
                continue
            figures = self._cell_figures(start_id, cell.name)
            if figures is None:
                continue
            items.append(("archive.control_start", p.ArchiveControlStart(
                start=start_id, role=role, cell=cell.name, max_tokens=self.plan.sampling.max_tokens,
                commit=self.plan.commit, clock_cap_mhz=real, figures=figures,
                control_config_digest=self.plan.arm(role).config_digest, production_commit=commit,
                **flag), ()))
        return items

    def _cell_figures(self, start_id: str, cell: str) -> dict[str, Any] | None:
        rounds = accepted = client_tokens = 0
        decode: list[float] = []
        client_s: list[float] = []
        ttfts: list[float] = []
        for event in self.ledger.events(self.ws.registered_seq or 0, stream=f"window/{self.window}",
                                        types=["wave.measured"]):
            w = read_payload(event, p.WaveMeasured)
            if w.start != start_id or w.cell != cell:
                continue
            c = w.counters
            if c.rounds is None or c.accepted is None or c.decode_s is None:
                return None
            rounds += c.rounds
            accepted += c.accepted
            decode.append(c.decode_s)
            client_tokens += w.client.tokens_after_first
            client_s.append(w.client.decode_s)
            ttfts += w.client.ttft_s
        if not decode or not rounds or not sum(decode):
            return None
        values = pooled_values(rounds, accepted, decode, client_tokens, client_s, ttfts)
        return {**values, "waves": len(decode)}

    def measurement_end(self, step: Step, _r: RunResult) -> None:
        why = step.args.get("why", "complete")
        self.append([("measurement.ended", p.MeasurementEnded(reason=why, waves=self.ws.waves), ())])
        self.say(f"measurement ended ({why}): {step.reason}")


HANDLERS: dict[StepKind, StepHandler] = {
    "start_arm": StartSteps.start_arm,
    "start_began": StartSteps.start_began,
    "config_gate": StartSteps.config_gate,
    "spec_gate": StartSteps.spec_gate,
    "attest_params": StartSteps.attest_params,
    "warmup": StartSteps.warmup,
    "prime": StartSteps.prime,
    "wave": StartSteps.wave,
    "budget": StartSteps.budget,
    "end_start": StartSteps.end_start,
    "measurement_end": StartSteps.measurement_end,
}
