"""The smoke stage's probes (``docs/smoke.md``): tiny T=0 requests to one start's engine, and their verdicts.

Every probe is a handful of tiny requests (at most a few dozen generated tokens), each
exchange bounded by the plan's ``timeout_s`` and its reply by 1 MiB, every reply read as
hostile input (:mod:`.probe`):

===================  =====================================================================
probe                passes when
===================  =====================================================================
``greedy_identity``  the start's T=0 continuation of the smoke prompt is the reference
                     start's, token for token (:mod:`.greedy`); the reference records its own
``structured``       a JSON-schema-constrained request (the plan's ``structured_field``)
                     answers JSON that parses and validates against the schema
``stop``             a stop string (a word of the T=0 continuation) ends the text right
                     before its first occurrence with ``finish_reason`` stop; with token ids,
                     ``stop_token_ids`` (a token of the continuation) ends it at that token
``eos``              ``allowed_token_ids = [EOS]`` ends after one token with ``finish_reason``
                     stop, and ``min_tokens`` holds that EOS back
``lifecycle``        a stream cancelled mid-way, a client that disconnects after sending, and
                     a request past its deadline (its late reply left to arrive) each leave
                     the server healthy: its model list and a control request answer
===================  =====================================================================

Pure verdicts live beside the requests; the runner (``runner.execution.smoke``) records
each probe as one ``smoke.result`` event with the exchanges as its evidence blob.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..plan.model import SMOKE_FAILURE_KIND, SMOKE_SCHEMA, Smoke
from ..rehearsal.probe import Probe, ProbeResult, send, token_count
from ..vocabulary import SmokeOutcome, SmokeProbe
from .greedy import Emitted, compare_greedy, emitted_of

if TYPE_CHECKING:
    import httpx

__all__ = ["ProbeVerdict", "SmokeSession", "validate_schema"]

LIFECYCLE_TOKENS = 64   # the long request a lifecycle probe cuts
CANCEL_READ_BYTES = 64 << 10  # what the cancelled stream reads at most before it is closed
MIN_DEADLINE_S = 0.001        # the shortest deadline the late-reply request is given
DEADLINE_ATTEMPTS = 3         # a reply that beats its deadline is asked again with half of it


@dataclass(frozen=True)
class ProbeVerdict:
    """One probe's outcome on one start, and the exchanges behind it (the evidence blob)."""

    probe: SmokeProbe
    outcome: SmokeOutcome
    summary: str
    checks: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None
    position: int | None = None
    margin: float | None = None

    @property
    def kind(self) -> str:
        return SMOKE_FAILURE_KIND[self.probe]


def _checked(probe: SmokeProbe, start: str, failures: list[str], passed: str, checks: dict[str, Any],
             evidence: dict[str, Any]) -> ProbeVerdict:
    """A probe of several checks: ``fail`` naming every failed one, else ``pass`` saying what held."""
    if failures:
        return ProbeVerdict(probe, "fail", f"{start}: " + "; ".join(failures), checks, evidence)
    return ProbeVerdict(probe, "pass", f"{start}: {passed}", checks, evidence)


def _answered(_probe: Probe, status: int, _body: Any, _parts: dict[str, Any]) -> tuple[bool, Any, str]:
    return (status == 200, "pass" if status == 200 else ("no_answer" if status >= 500 else "wrong"),
            f"HTTP {status}")


def _body(result: ProbeResult) -> Any:
    from ledger.errors import FormatError
    from ledger.strictjson import read_json

    if result.response_text is None:
        return None
    try:
        return read_json(result.response_text.encode(), "the reply", max_bytes=1 << 20)
    except FormatError:
        return None


def _exchange(result: ProbeResult) -> dict[str, Any]:
    return {"probe": result.name, "request": result.request, "status": result.status, "detail": result.detail,
            "finish_reason": result.finish_reason, "usage": result.usage, "elapsed_s": round(result.elapsed_s, 6),
            "response": _body(result), "error": result.error}


def validate_schema(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """What in ``value`` breaks ``schema`` (type, required, properties, items, enum); empty when valid."""
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool}
    kind = schema.get("type")
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} is not one of the enum")
    if kind in kinds and not isinstance(value, kinds[kind]):
        return [*problems, f"{path}: expected {kind}"]
    if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        return [*problems, f"{path}: expected integer"]
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float)):
        return [*problems, f"{path}: expected number"]
    if kind == "object" and isinstance(value, dict):
        problems += [f"{path}: {name!r} is required" for name in schema.get("required", []) if name not in value]
        for name, sub in (schema.get("properties") or {}).items():
            if name in value and isinstance(sub, dict):
                problems += validate_schema(value[name], sub, f"{path}.{name}")
    if kind == "array" and isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            problems += validate_schema(item, schema["items"], f"{path}[{i}]")
    return problems


class SmokeSession:
    """The probes of one start, against its serving URL (one HTTP client, tiny requests)."""

    def __init__(self, url: str, model: str, smoke: Smoke, *, transport: httpx.BaseTransport | None = None) -> None:
        import httpx

        from ..measure.transport import StampingTransport

        self.url = url.rstrip("/")
        self.model = model
        self.smoke = smoke
        self.client = httpx.Client(transport=transport or StampingTransport())
        self.greedy_elapsed_s = 0.0

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> SmokeSession:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    def completion(self, max_tokens: int | None = None, **extra: Any) -> dict[str, Any]:
        s = self.smoke
        body: dict[str, Any] = {"model": self.model, "prompt": s.prompt, "max_tokens": max_tokens or s.max_tokens,
                                "temperature": 0.0, "top_p": 1.0, "seed": s.seed, "stream": False}
        if s.compare == "token_ids":
            body["return_token_ids"] = True
        body.update(extra)
        return body

    def send(self, name: str, body: dict[str, Any], path: str = "/v1/completions",
             timeout: float | None = None) -> ProbeResult:
        result, _timed_out = send(self.client, self.url, Probe(name, path, body, "an answer"),
                                  timeout or self.smoke.timeout_s, _answered)
        return result

    def healthy(self, tag: str) -> tuple[bool, list[dict[str, Any]], str]:
        """The model list answers and a tiny control request comes back with a token."""
        from ..measure.bounds import fetch

        exchanges: list[dict[str, Any]] = []
        try:
            reply = fetch(self.client, "GET", self.url + "/v1/models", deadline_s=self.smoke.timeout_s,
                          max_bytes=1 << 20, what="the model list")
            listed = reply.status == 200
            exchanges.append({"probe": f"{tag}-models", "status": reply.status})
        except Exception as exc:
            listed = False
            exchanges.append({"probe": f"{tag}-models", "status": None, "error": f"{type(exc).__name__}: {exc}"})
        control = self.send(f"{tag}-control", self.completion(2))
        exchanges.append(_exchange(control))
        tokens = token_count(control.parts) or 0
        ok = listed and control.status == 200 and tokens >= 1
        why = "healthy" if ok else ("the model list did not answer" if not listed else
                                    f"the control request got {control.detail}")
        return ok, exchanges, why

    # ------------------------------------------------------------------ probes

    def greedy(self, start: str, reference: tuple[str, Emitted] | None) -> tuple[ProbeVerdict, Emitted | None]:
        """The start's T=0 continuation; compared with the reference's when there is one."""
        s = self.smoke
        extra = {"logprobs": s.logprobs} if s.logprobs else {}
        result = self.send("greedy", self.completion(**extra))
        exchanges = [_exchange(result)]
        if extra and result.status is not None and result.status != 200:
            # logprobs where the server exposes them: one that refuses them is asked again without
            result = self.send("greedy-no-logprobs", self.completion())
            exchanges.append(_exchange(result))
        self.greedy_elapsed_s = result.elapsed_s
        emitted = emitted_of(_body(result), s.compare) if result.status == 200 else None
        if emitted is None and result.status == 200 and not s.declared:
            emitted = emitted_of(_body(result), "text")  # greedy_check's stage: text where no ids come
        evidence: dict[str, Any] = {"exchanges": exchanges,
                                    "emitted": emitted.to_json() if emitted is not None else None}
        if emitted is None:
            what = "no token ids (declare compare = \"text\")" if result.status == 200 else result.detail
            return ProbeVerdict("greedy_identity", "fail", f"{start}: no T=0 continuation to compare: {what}",
                                {"answered": result.status == 200}, evidence), None
        if reference is None:
            return ProbeVerdict("greedy_identity", "recorded",
                                f"{start}: the greedy reference ({len(emitted.sequence)} {emitted.basis})",
                                {"length": len(emitted.sequence)}, evidence), emitted
        ref_start, ref = reference
        found = compare_greedy(ref, emitted, s.near_tie_margin)
        evidence["reference"] = {"start": ref_start, "emitted": ref.to_json()}
        evidence["divergence"] = {"position": found.position, "margin": found.margin,
                                  "reference_continuation": list(found.reference_continuation),
                                  "candidate_continuation": list(found.candidate_continuation)}
        outcome: SmokeOutcome = "pass" if found.identical else "near_tie" if found.near_tie else "fail"
        return ProbeVerdict("greedy_identity", outcome, found.summary(ref_start, start, emitted.basis),
                            {"identical": found.identical, "basis": emitted.basis,
                             "length": len(emitted.sequence), "reference_length": len(ref.sequence)},
                            evidence, ref_start, found.position, found.margin), emitted

    def structured(self, start: str) -> ProbeVerdict:
        from ledger.errors import FormatError
        from ledger.strictjson import read_json

        s = self.smoke
        schema = dict(SMOKE_SCHEMA)
        path = "/v1/completions"
        if s.structured_field == "structured_outputs":
            body = self.completion(64, structured_outputs={"json": schema})
        elif s.structured_field == "guided_json":
            body = self.completion(64, guided_json=schema)
        else:  # llama-cpp-python's chat completions: response_format json_object with a schema
            path = "/v1/chat/completions"
            body = {"model": self.model, "messages": [{"role": "user", "content": s.prompt}], "max_tokens": 64,
                    "temperature": 0.0, "seed": s.seed, "stream": False,
                    "response_format": {"type": "json_object", "schema": schema}}
        result = self.send("structured", body, path)
        evidence = {"exchanges": [_exchange(result)], "schema": schema}
        text = result.parts.get("text") if result.status == 200 else None
        if not isinstance(text, str):
            return ProbeVerdict("structured", "fail", f"{start}: no structured answer ({result.detail})",
                                {"parsed": False}, evidence)
        try:
            value = read_json(text.encode(), "the structured answer", max_bytes=1 << 16)
        except FormatError:
            return ProbeVerdict("structured", "fail", f"{start}: the {s.structured_field} answer is not JSON",
                                {"parsed": False}, evidence)
        problems = validate_schema(value, schema)
        if problems:
            return ProbeVerdict("structured", "fail", f"{start}: the answer breaks the schema: {problems[0]}",
                                {"parsed": True, "valid": False, "problems": problems[:8]}, evidence)
        return ProbeVerdict("structured", "pass", f"{start}: {s.structured_field} answer parses and validates",
                            {"parsed": True, "valid": True}, evidence)

    def stop(self, start: str, baseline: Emitted | None) -> ProbeVerdict:
        s = self.smoke
        exchanges: list[dict[str, Any]] = []
        if baseline is None:
            first = self.send("stop-baseline", self.completion())
            exchanges.append(_exchange(first))
            baseline = emitted_of(_body(first), s.compare) if first.status == 200 else None
        words = baseline.text.split() if baseline is not None else []
        if baseline is None or len(words) < 3:
            return ProbeVerdict("stop", "fail", f"{start}: no T=0 continuation long enough to place a stop in",
                                {}, {"exchanges": exchanges})
        checks: dict[str, Any] = {}
        failures: list[str] = []
        word = words[len(words) // 2]
        expected = baseline.text[: baseline.text.find(word)]
        cut = self.send("stop-string", self.completion(stop=[word]))
        exchanges.append(_exchange(cut))
        got = cut.parts.get("text")
        checks["stop_string"] = {"stop": word, "expected_chars": len(expected), "finish_reason": cut.finish_reason,
                                 "ok": cut.status == 200 and got == expected and cut.finish_reason == "stop"}
        if not checks["stop_string"]["ok"]:
            failures.append(f"stop string {word!r} did not end the text where it first occurs "
                            f"(finish {cut.finish_reason}, {len(got or '')} chars, expected {len(expected)})")
        if baseline.basis == "token_ids" and len(baseline.sequence) >= 3:
            token = baseline.sequence[len(baseline.sequence) // 2]
            at = baseline.sequence.index(token)
            ids = self.send("stop-token-ids", self.completion(stop_token_ids=[token]))
            exchanges.append(_exchange(ids))
            count = token_count(ids.parts)
            ok = ids.status == 200 and ids.finish_reason == "stop" and count in (at, at + 1)
            checks["stop_token_ids"] = {"token": token, "position": at, "completion_tokens": count,
                                        "finish_reason": ids.finish_reason, "ok": ok}
            if not ok:
                failures.append(f"stop_token_ids [{token}] did not end the stream at position {at} "
                                f"(finish {ids.finish_reason}, {count} tokens)")
        evidence = {"exchanges": exchanges}
        also = " and stop_token_ids" if len(checks) > 1 else ""
        return _checked("stop", start, failures, f"stop strings{also} end the stream where they should", checks,
                        evidence)

    def eos(self, start: str) -> ProbeVerdict:
        s = self.smoke
        eos = s.eos_token_id
        assert eos is not None  # the plan requires it with this probe
        exchanges = []
        once = self.send("eos-once", self.completion(4, allowed_token_ids=[eos], ignore_eos=False))
        exchanges.append(_exchange(once))
        count = token_count(once.parts)
        held = self.send("eos-min-tokens", self.completion(6, allowed_token_ids=[eos],
                                                           min_tokens=3, ignore_eos=False))
        exchanges.append(_exchange(held))
        held_count = token_count(held.parts)
        checks = {"eos_once": {"completion_tokens": count, "finish_reason": once.finish_reason,
                               "ok": once.status == 200 and count == 1 and once.finish_reason == "stop"},
                  "min_tokens": {"completion_tokens": held_count, "finish_reason": held.finish_reason,
                                 "ok": held.status == 200 and held_count is not None and held_count >= 3}}
        failures = []
        if not checks["eos_once"]["ok"]:
            failures.append(f"allowed_token_ids=[{eos}] gave {count} token(s), finish {once.finish_reason} "
                            "(expected 1, stop)")
        if not checks["min_tokens"]["ok"]:
            failures.append(f"min_tokens 3 did not hold EOS back ({held_count} token(s))")
        evidence = {"exchanges": exchanges}
        return _checked("eos", start, failures, "EOS ends after one token; min_tokens holds it back", checks,
                        evidence)

    def lifecycle(self, start: str) -> ProbeVerdict:
        checks: dict[str, Any] = {}
        exchanges: list[dict[str, Any]] = []
        failures: list[str] = []
        for name, act in (("cancel", self._cancel_mid_stream), ("disconnect", self._disconnect),
                          ("deadline", self._past_deadline)):
            what = act()
            ok, seen, why = self.healthy(name)
            exchanges += [{"probe": name, **what}, *seen]
            checks[name] = {**what, "healthy_after": ok}
            if not ok:
                failures.append(f"after {name}: {why}")
        evidence = {"exchanges": exchanges}
        return _checked("lifecycle", start, failures, "cancel, disconnect and a late reply leave it healthy",
                        checks, evidence)

    def _long(self, stream: bool) -> dict[str, Any]:
        return self.completion(LIFECYCLE_TOKENS, stream=stream, ignore_eos=True)

    def _cancel_mid_stream(self) -> dict[str, Any]:
        """A stream read until its first data, then closed."""
        from ..measure.transport import deadline_guard

        got = b""
        began = time.perf_counter()
        try:
            with deadline_guard(began + self.smoke.timeout_s), \
                    self.client.stream("POST", self.url + "/v1/completions", json=self._long(True)) as reply:
                status = reply.status_code
                for part in reply.iter_bytes():
                    got += part
                    if b"data:" in got:
                        break
        except Exception as exc:
            return {"status": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
        return {"status": status, "bytes_before_cancel": len(got), "cancelled": b"[DONE]" not in got}

    def _disconnect(self) -> dict[str, Any]:
        """A request sent on a raw socket that is closed before any reply is read."""
        parts = urlsplit(self.url)
        body = json.dumps(self._long(True)).encode()
        head = (f"POST {parts.path.rstrip('/')}/v1/completions HTTP/1.1\r\nHost: {parts.hostname}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        try:
            with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80),
                                          timeout=self.smoke.timeout_s) as sock:
                sock.sendall(head + body)
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        except OSError as exc:
            return {"sent": False, "error": str(exc)[:300]}
        time.sleep(min(0.2, self.smoke.timeout_s / 10))
        return {"sent": True}

    def _past_deadline(self) -> dict[str, Any]:
        """A request whose deadline passes before its reply; the reply is left to arrive late.

        The deadline is a quarter of the greedy request's time (a quarter of its tokens, for a
        reply of four times as many); a reply that still beats it (the greedy time was inflated
        by a busy machine) is asked again with half the deadline, at most three times.
        """
        deadline = max(MIN_DEADLINE_S, self.greedy_elapsed_s * 0.25)
        tried: list[float] = []
        for _attempt in range(DEADLINE_ATTEMPTS):
            tried.append(round(deadline, 6))
            result = self.send("deadline", self._long(False), timeout=deadline)
            if result.status is None:
                break
            deadline = max(MIN_DEADLINE_S, deadline / 2)
        timed_out = result.status is None
        if timed_out:  # give the late reply time to be written to a socket nobody reads
            time.sleep(min(self.smoke.timeout_s / 4, max(0.05, self.greedy_elapsed_s * LIFECYCLE_TOKENS
                                                         / self.smoke.max_tokens)))
        return {"deadline_s": tried[-1], "deadlines_s": tried, "timed_out": timed_out, "status": result.status}
