"""The API rehearsal and capability probe (``docs/gates.md``): send the admission's probes to production first.

Five tiny non-streaming probes (at most 8 generated tokens each, ``priority`` 10, sent
back to back with no idle wait):

=============  ==========================  ==============================================
probe          request                     passes when
=============  ==========================  ==============================================
``plain``      ``/v1/completions``         HTTP 200 with a choice
``chat``       ``/v1/chat/completions``    HTTP 200 with a choice
``seeded``     completion, T=1, top_p=1,   HTTP 200 with a choice
               ``seed`` 42
``terminator`` completion forcing EOS with HTTP 200, ``finish_reason`` ``stop``
               ``allowed_token_ids``       (a vLLM check)
``control``    the ``logit_bias`` probe    HTTP 400 whose message says the parameter is
               replayed                    not supported with speculative decoding (the
                                           vLLM check of the R16 cause); or HTTP 200 when
                                           the capability probe then shows ``logit_bias``
                                           honoured (below)
=============  ==========================  ==============================================

then the admission's own probes when a probe list is given (:mod:`.probe_list`: each
with its expected outcome, as tiny as the fixed ones; they always decide), then the
capability probe's requests (:mod:`.capability`, at most 8 tokens each, also
back to back), which record for every request field a window relies on whether the
server honours, ignores or refuses it. The probe fails when a field the window needs
(:func:`.capability.plan_needs`, plus the vLLM checks unless they are turned off) is
not as needed; ``accept_ignored`` names fields the operator accepts being ignored
(recorded). With the vLLM checks off the terminator and control are still sent and
recorded, but do not decide.

Each probe's whole exchange is bounded by the timeout and its reply by 1 MiB
(:mod:`.probe`); a probe over either is "no answer, rerun". After a probe got no
answer within the timeout, the remaining probes are not sent (recorded as "no answer,
rerun", ``not sent``).

The control is learnt, not assumed: vLLM refuses ``logit_bias`` only when the server runs
speculative decoding (vLLM 0.32 still does: ``SamplingParams._validate_spec_decode``), and
a production without speculative decoding answers it 200. When the control came back 200
and ``bias-eos`` shows the server acting on ``logit_bias`` (EOS forced at once), the
control passes ("the refusal it replays cannot happen here") and the vLLM check wants
``logit_bias`` honoured instead of refused; a 200 on a server that ignores it still fails.

Reading of a failure: transport error or 5xx = "no answer, rerun"; anything else (a 4xx,
a 200 where the control expected 400 and ``logit_bias`` is not honoured, a wrong finish
reason) = "probe wrong for this server". ``cause_confirmed`` is true when the control came
back 400 with the speculative-decoding message. Verdict PASS when every deciding probe passed and every
needed field is as needed; the command exits 0 PASS, 3 when every failure is "no
answer", else 1.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.strictwrite import open_dir, write_whole

from ..vocabulary import GateVerdict
from .capability import (
    FieldResult,
    Need,
    assess,
    assess_logit_bias,
    capability_probes,
    forced_probes,
    judge_answered,
    priority_read,
    typed_probes,
    vllm_needs,
)
from .priority import PROBE_NAME as PRIORITY_PROBE
from .priority import probe_priority
from .probe import (
    MAX_TOKENS,
    PRIORITY,
    Judge,
    Outcome,
    Probe,
    ProbeResult,
    error_of,
    has_choice,
    not_sent,
    send,
    token_count,
)
from .probe_list import ProbeList, judge_expected

if TYPE_CHECKING:
    import httpx

__all__ = ["MAX_TOKENS", "PRIORITY", "RESERVED_NAMES", "VLLM_PROBES", "Probe", "ProbeResult", "Rehearsal", "probes",
           "rehearse", "responses_jsonl", "write_rehearsal"]

SPEC_DECODE_MESSAGE = "speculative decoding"
VLLM_PROBES = ("terminator", "control")
"""The probes that hold only on vLLM (``allowed_token_ids``; ``logit_bias`` refused under speculation)."""
RESERVED_NAMES = ("plain", "chat", "seeded", "terminator", "control", "allowed-eos", "baseline", "bias-eos",
                  "cache-salt", "cache-salt-type", "ignore-eos", "priority-type", "seed-a", "seed-b", "seed-c",
                  "stop-token-ids", "token-ids", "usage", "reasoning-effort", "reasoning-effort-type", "top-k",
                  "top-k-type", "min-p", "min-p-type", PRIORITY_PROBE)
"""Names the fixed and capability probes use: a listed probe may not take one."""


def probes(eos: int, model: str | None = None) -> tuple[Probe, ...]:
    """The admission's probes, in the order they are sent."""
    base: dict[str, Any] = {"max_tokens": MAX_TOKENS, "priority": PRIORITY, "stream": False}
    if model:
        base["model"] = model
    return (
        Probe("plain", "/v1/completions", {**base, "prompt": "Reply with one short word."}, "HTTP 200 with a choice"),
        Probe("chat", "/v1/chat/completions",
              {**base, "messages": [{"role": "user", "content": "Reply with one short word."}]},
              "HTTP 200 with a choice"),
        Probe("seeded", "/v1/completions",
              {**base, "prompt": "Count: one, two,", "temperature": 1.0, "top_p": 1.0, "seed": 42},
              "HTTP 200 with a choice"),
        Probe("terminator", "/v1/completions", {**base, "prompt": "Stop here.", "allowed_token_ids": [eos]},
              "HTTP 200, finish_reason stop (EOS forced with allowed_token_ids)"),
        Probe("control", "/v1/completions", {**base, "prompt": "Stop here.", "logit_bias": {str(eos): 100}},
              "HTTP 400: logit_bias is not supported with speculative decoding (vLLM)"),
    )


@dataclass(frozen=True)
class Rehearsal:
    url: str
    eos: int
    results: tuple[ProbeResult, ...]
    capability_results: tuple[ProbeResult, ...] = ()
    fields: tuple[FieldResult, ...] = ()
    needs: tuple[Need, ...] = ()
    vllm_checks: bool = True
    accept_ignored: tuple[str, ...] = ()
    listed_results: tuple[ProbeResult, ...] = ()   # the admission's probe list (``--probes``), in its order
    probe_list: ProbeList | None = None

    @property
    def deciding(self) -> tuple[ProbeResult, ...]:
        """The probes that decide: all five fixed ones (without the vLLM checks the first three), then the list's."""
        fixed = self.results if self.vllm_checks else tuple(r for r in self.results if r.name not in VLLM_PROBES)
        return fixed + self.listed_results

    @property
    def field_failures(self) -> tuple[FieldResult, ...]:
        return tuple(f for f in self.fields if f.failure is not None)

    @property
    def verdict(self) -> GateVerdict:
        return "PASS" if all(r.ok for r in self.deciding) and not self.field_failures else "FAIL"

    @property
    def cause_confirmed(self) -> bool:
        return any(r.name == "control" and r.ok and r.status == 400 for r in self.results)

    @property
    def no_answer(self) -> bool:
        """Every failure is 'no answer' (exit 3): nothing was learnt about the probes."""
        failures = [r.outcome == "no_answer" for r in self.deciding if not r.ok]
        failures += [f.no_answer for f in self.field_failures]
        return bool(failures) and all(failures)

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "PASS" else 3 if self.no_answer else 1

    @property
    def summary(self) -> str:
        if self.verdict == "PASS":
            control = ("vLLM checks off" if not self.vllm_checks else
                       "the control came back 400 (cause confirmed)" if self.cause_confirmed else
                       "the control came back 200 and logit_bias is honoured here (no refusal to confirm)")
            needed = [f.field for f in self.fields
                      if f.need is not None and f.need.want != "accepted" and not f.accepted_ignored]
            text = f"PASS: every probe answered as expected; {control}"
            if self.listed_results:
                text += f"; {len(self.listed_results)} listed probe(s) as expected"
            if needed:
                text += f"; every field needed is as needed ({', '.join(needed)})"
            accepted = [f.field for f in self.fields if f.accepted_ignored and f.need is not None]
            if accepted:
                text += f"; ignored and accepted: {', '.join(accepted)}"
            return text
        failed = ", ".join(f"{r.name} ({r.reading})" for r in self.deciding if not r.ok)
        fields = "; ".join(str(f.failure) for f in self.field_failures)
        return "FAIL: " + "; ".join(part for part in (failed, fields) if part)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "cause_confirmed": self.cause_confirmed,
            "no_answer": self.no_answer,
            "reading": [{"probe": r.name, "reading": r.reading, "detail": r.detail}
                        for r in self.deciding if not r.ok],
            "url": self.url,
            "eos": self.eos,
            "max_tokens": MAX_TOKENS,
            "priority": PRIORITY,
            "probes": [dict(r.to_json(), vllm_check=r.name in VLLM_PROBES) for r in self.results],
            "vllm_checks": self.vllm_checks,
            "needs": [n.to_json() for n in self.needs],
            "accept_ignored": list(self.accept_ignored),
            "fields": {f.field: f.status for f in self.fields},
            "capabilities": [f.to_json() for f in self.fields],
            "capability_failures": [f.failure for f in self.field_failures],
            "capability_probes": [r.to_json() for r in self.capability_results],
            **({} if self.probe_list is None else {
                "probe_list": self.probe_list.to_json(),
                "listed_probes": [r.to_json() for r in self.listed_results]}),
        }


def _judge(probe: Probe, status: int, body: Any, parts: dict[str, Any]) -> tuple[bool, Outcome, str]:
    """(ok, outcome, detail) for an HTTP answer to one of the admission's probes."""
    if status >= 500:
        return False, "no_answer", f"HTTP {status}"
    _error, message = error_of(body)
    if probe.name == "control":
        if status == 400 and SPEC_DECODE_MESSAGE in message.lower():
            return True, "pass", "HTTP 400 with the speculative-decoding message"
        if status == 200:
            return False, "wrong", "the control came back 200: this server accepts logit_bias, so the control " \
                                   "probe cannot confirm the cause (is speculative decoding on?)"
        return False, "wrong", f"HTTP {status} without the speculative-decoding message: {message[:200]}"
    if status != 200:
        return False, "wrong", f"HTTP {status}: {message[:200]}"
    if not has_choice(body):
        return False, "wrong", "HTTP 200 without a choice"
    tokens = token_count(parts)
    if isinstance(tokens, int) and tokens > MAX_TOKENS:
        return False, "wrong", f"generated {tokens} tokens, more than {MAX_TOKENS}"
    if probe.name == "terminator" and parts.get("finish_reason") != "stop":
        return False, "wrong", f"finish_reason {parts.get('finish_reason')!r}, not 'stop'"
    return True, "pass", "HTTP 200"


class _Sender:
    """Sends probes back to back; after one got no answer within the timeout, the rest are not sent."""

    def __init__(self, client: httpx.Client, url: str, timeout: float) -> None:
        self.client, self.url, self.timeout = client, url, timeout
        self.stalled: str | None = None

    def __call__(self, probe: Probe, judge: Judge) -> ProbeResult:
        if self.stalled is not None:
            return not_sent(probe, f"not sent: probe {self.stalled} got no answer within {self.timeout:g} s")
        result, timed_out = send(self.client, self.url, probe, self.timeout, judge)
        if timed_out:
            self.stalled = probe.name
        return result


def rehearse(url: str, eos: int, *, model: str | None = None, timeout: float = 30.0,
             transport: httpx.BaseTransport | None = None, headers: dict[str, str] | None = None,
             needs: Sequence[Need] = (), vllm_checks: bool = True,
             accept_ignored: Sequence[str] = (), probe_list: ProbeList | None = None,
             auth: httpx.Auth | None = None) -> Rehearsal:
    """Send every probe once, in order, with no idle wait between them; then read every field.

    ``needs`` are the window's (:func:`.capability.plan_needs`); the vLLM checks add
    theirs unless ``vllm_checks`` is false. Each probe's whole exchange is bounded by
    ``timeout`` (however slowly the server dribbles its reply) and its reply by 1 MiB.
    A probe that got no complete answer in time means the server is not answering: the
    probes after it are not sent (each recorded as "no answer, rerun", not sent), so a
    stalled server costs one timeout, not one per probe. ``probe_list`` (the admission's
    own probes, :func:`.probe_list.read_probe_list`) is sent after the fixed five, each
    judged against its expected outcome. Credentials go as ``auth`` (an
    :class:`~runner.measure.urls.OriginAuth`: only to their own origin), not in ``headers``.
    """
    import httpx

    from ..measure.transport import StampingTransport

    with httpx.Client(transport=transport or StampingTransport(), headers=headers, auth=auth) as client:
        sender = _Sender(client, url, timeout)
        results = tuple(sender(probe, _judge) for probe in probes(eos, model))
        listed = tuple(sender(probe, judge_expected) for probe in (probe_list.probes if probe_list else ()))
        capability = tuple(sender(probe, judge_answered)
                           for probe in capability_probes(eos, model, {r.name: r for r in results}))
        seen = {r.name: r for r in results + capability}
        capability += tuple(sender(probe, judge_answered) for probe in forced_probes(eos, model, seen))
        if sender.stalled is None and priority_read({r.name: r for r in results + capability}):
            wanted = any(n.field == "priority" and n.want == "honoured" for n in needs)
            capability += (probe_priority(client, url, model, timeout, behaviour=wanted),)
        # the engine-side fields the window registers, last (a server may fail on one: docs/gates.md)
        capability += tuple(sender(probe, judge_answered) for probe in typed_probes(model, {n.field for n in needs}))
    probed = {r.name: r for r in results + capability}
    results = tuple(_learnt_control(r, probed) if r.name == "control" else r for r in results)
    control = next((r for r in results if r.name == "control"), None)
    answered = control is not None and control.status == 200
    all_needs = tuple(needs) + (vllm_needs(control_answered=answered) if vllm_checks else ())
    fields = assess(eos, {r.name: r for r in results + capability}, all_needs, accept_ignored)
    return Rehearsal(url, eos, results, capability, fields, all_needs, vllm_checks, tuple(accept_ignored),
                     listed, probe_list)


def _learnt_control(control: ProbeResult, probed: dict[str, ProbeResult]) -> ProbeResult:
    """The control judged with what the capability probe learnt: a 200 from a server that acts on
    ``logit_bias`` (``bias-eos`` stopped at once) passes, since the refusal it replays cannot happen there."""
    if control.status != 200:
        return control
    status, detail = assess_logit_bias(probed)
    if status != "honoured":
        return control
    return replace(control, ok=True, outcome="pass", reading=None,
                   detail=f"HTTP 200: this server accepts logit_bias and acts on it ({detail}): no speculative "
                          "decoding here, or a vLLM that supports it; the refusal the control replays cannot happen")


def responses_jsonl(rehearsal: Rehearsal) -> bytes:
    lines = []
    for r in rehearsal.results + rehearsal.listed_results + rehearsal.capability_results:
        lines.append(json.dumps({"probe": r.name, "status": r.status, "response_sha256": r.response_sha256,
                                 "body": r.response_text, "error": r.error if r.status is None else None},
                                sort_keys=True))
    return ("\n".join(lines) + "\n").encode()


def write_rehearsal(rehearsal: Rehearsal, out: Path) -> tuple[Path, Path, bytes]:
    """Write ``rehearsal.json`` and ``responses.jsonl`` (mode 0600) into ``out``.

    Neither ``out`` nor a file in it is ever used through a symlink (``ledger.strictwrite``:
    each file is written whole to a fresh temporary name and renamed over its name).
    """
    body = responses_jsonl(rehearsal)
    summary = (json.dumps(rehearsal.to_json(), indent=2, sort_keys=True) + "\n").encode()
    directory = open_dir(out, "--out")
    try:
        write_whole("responses.jsonl", body, "--out", dir_fd=directory, shown=out / "responses.jsonl")
        write_whole("rehearsal.json", summary, "--out", dir_fd=directory, shown=out / "rehearsal.json")
    finally:
        os.close(directory)
    return out / "rehearsal.json", out / "responses.jsonl", body
