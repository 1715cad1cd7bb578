"""The API rehearsal (``docs/gates.md``): send the admission's probes to production first.

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
               ``allowed_token_ids``
``control``    the ``logit_bias`` probe    HTTP 400 whose message says the parameter is
               replayed                    not supported with speculative decoding
=============  ==========================  ==============================================

Each probe's whole exchange is bounded by the timeout (an overall deadline, not per
read: a server trickling bytes cannot stretch it) and its reply by 1 MiB; a probe over
either is "no answer, rerun". After a probe got no answer within the timeout, the
remaining probes are not sent (recorded as "no answer, rerun", ``not sent``).

Reading of a failure: transport error or 5xx = "no answer, rerun"; anything else (a 4xx,
a 200 where the control expected 400, a wrong finish reason) = "probe wrong for this
server". ``cause_confirmed`` is true when the control came back 400 with the
speculative-decoding message. Verdict PASS when every probe passed; the command exits
0 PASS, 3 when every failure is "no answer", else 1.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..vocabulary import GateVerdict

if TYPE_CHECKING:
    import httpx

__all__ = ["MAX_TOKENS", "PRIORITY", "Probe", "ProbeResult", "Rehearsal", "probes", "rehearse", "write_rehearsal"]

MAX_TOKENS = 8
PRIORITY = 10
NO_ANSWER = "no answer, rerun"
WRONG_PROBE = "probe wrong for this server"
SPEC_DECODE_MESSAGE = "speculative decoding"
Outcome = Literal["pass", "no_answer", "wrong"]


@dataclass(frozen=True)
class Probe:
    name: str
    path: str
    body: dict[str, Any]
    expect: str


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
              "HTTP 400: logit_bias is not supported with speculative decoding"),
    )


@dataclass(frozen=True)
class ProbeResult:
    name: str
    endpoint: str
    request: dict[str, Any]
    request_sha256: str
    status: int | None
    ok: bool
    outcome: Outcome
    reading: str | None
    detail: str
    error: Any
    finish_reason: str | None
    stop_reason: Any
    usage: Any
    response_sha256: str | None
    elapsed_s: float
    response_text: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "probe": self.name, "endpoint": self.endpoint, "request": self.request,
            "request_sha256": self.request_sha256, "status": self.status, "ok": self.ok,
            "reading": self.reading, "detail": self.detail, "error": self.error,
            "finish_reason": self.finish_reason, "stop_reason": self.stop_reason, "usage": self.usage,
            "response_sha256": self.response_sha256, "elapsed_s": round(self.elapsed_s, 6),
        }


@dataclass(frozen=True)
class Rehearsal:
    url: str
    eos: int
    results: tuple[ProbeResult, ...]

    @property
    def verdict(self) -> GateVerdict:
        return "PASS" if all(r.ok for r in self.results) else "FAIL"

    @property
    def cause_confirmed(self) -> bool:
        return any(r.name == "control" and r.ok for r in self.results)

    @property
    def no_answer(self) -> bool:
        """Every failure is 'no answer' (exit 3): nothing was learnt about the probes."""
        failures = [r for r in self.results if not r.ok]
        return bool(failures) and all(r.outcome == "no_answer" for r in failures)

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "PASS" else 3 if self.no_answer else 1

    @property
    def summary(self) -> str:
        if self.verdict == "PASS":
            return "PASS: every probe answered as expected; the control came back 400 (cause confirmed)"
        failed = ", ".join(f"{r.name} ({r.reading})" for r in self.results if not r.ok)
        return f"FAIL: {failed}"

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "cause_confirmed": self.cause_confirmed,
            "no_answer": self.no_answer,
            "reading": [{"probe": r.name, "reading": r.reading, "detail": r.detail}
                        for r in self.results if not r.ok],
            "url": self.url,
            "eos": self.eos,
            "max_tokens": MAX_TOKENS,
            "priority": PRIORITY,
            "probes": [r.to_json() for r in self.results],
        }


def _error_of(body: Any) -> tuple[Any, str]:
    """The error object and its message, for vLLM's nested and older flat error bodies."""
    if isinstance(body, dict):
        if isinstance(body.get("error"), dict):
            return body["error"], str(body["error"].get("message", ""))
        if body.get("object") == "error" or "message" in body:
            return body, str(body.get("message", ""))
    return body, ""


def _judge(probe: Probe, status: int, body: Any) -> tuple[bool, Outcome, str]:
    """(ok, outcome, detail) for an HTTP answer."""
    if status >= 500:
        return False, "no_answer", f"HTTP {status}"
    _error, message = _error_of(body)
    if probe.name == "control":
        if status == 400 and SPEC_DECODE_MESSAGE in message.lower():
            return True, "pass", "HTTP 400 with the speculative-decoding message"
        if status == 200:
            return False, "wrong", "the control came back 200: this server accepts logit_bias, so the control " \
                                   "probe cannot confirm the cause (is speculative decoding on?)"
        return False, "wrong", f"HTTP {status} without the speculative-decoding message: {message[:200]}"
    if status != 200:
        return False, "wrong", f"HTTP {status}: {message[:200]}"
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False, "wrong", "HTTP 200 without a choice"
    usage = body.get("usage") if isinstance(body, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(tokens, int) and tokens > MAX_TOKENS:
        return False, "wrong", f"generated {tokens} tokens, more than {MAX_TOKENS}"
    if probe.name == "terminator" and choices[0].get("finish_reason") != "stop":
        return False, "wrong", f"finish_reason {choices[0].get('finish_reason')!r}, not 'stop'"
    return True, "pass", "HTTP 200"


def _no_answer(probe: Probe, request_sha: str, detail: str, error: Any, elapsed: float) -> ProbeResult:
    return ProbeResult(probe.name, probe.path, probe.body, request_sha, None, False, "no_answer", NO_ANSWER,
                       detail, error, None, None, None, None, elapsed, None)


def _request_bytes(probe: Probe) -> tuple[bytes, str]:
    data = json.dumps(probe.body, separators=(",", ":"), sort_keys=True).encode()
    return data, hashlib.sha256(data).hexdigest()


def _run_probe(client: httpx.Client, url: str, probe: Probe, timeout: float) -> tuple[ProbeResult, bool]:
    """One probe, its whole exchange within ``timeout`` seconds and its reply within 1 MiB; (result, timed out)."""
    import time

    import httpx

    from ledger.errors import FormatError
    from ledger.strictjson import read_json

    from ..measure.bounds import MAX_PROBE_BYTES, ReplyRefused, fetch

    data, request_sha = _request_bytes(probe)
    began = time.perf_counter()
    try:
        reply = fetch(client, "POST", url.rstrip("/") + probe.path, content=data, deadline_s=timeout,
                      max_bytes=MAX_PROBE_BYTES, what="the reply", headers={"content-type": "application/json"})
    except httpx.TimeoutException as exc:
        detail = f"no complete answer within {timeout:g} s ({type(exc).__name__})"
        return _no_answer(probe, request_sha, detail, {"transport": detail}, time.perf_counter() - began), True
    except ReplyRefused as exc:
        detail = str(exc)
        return _no_answer(probe, request_sha, detail, {"transport": detail}, time.perf_counter() - began), False
    except (httpx.HTTPError, OSError) as exc:
        detail = f"{type(exc).__name__}: {exc}"[:500]
        return _no_answer(probe, request_sha, detail, {"transport": detail}, time.perf_counter() - began), False
    elapsed = time.perf_counter() - began
    raw = reply.body
    text = reply.text
    try:
        body: Any = read_json(raw, "the reply", max_bytes=MAX_PROBE_BYTES)
    except FormatError:
        body = text
    ok, outcome, detail = _judge(probe, reply.status, body)
    choice = body["choices"][0] if (isinstance(body, dict) and isinstance(body.get("choices"), list)
                                    and body["choices"] and isinstance(body["choices"][0], dict)) else {}
    error = _error_of(body)[0] if reply.status >= 400 else None
    reading = None if ok else (NO_ANSWER if outcome == "no_answer" else WRONG_PROBE)
    return ProbeResult(
        probe.name, probe.path, probe.body, request_sha, reply.status, ok, outcome, reading, detail, error,
        choice.get("finish_reason"), choice.get("stop_reason"),
        body.get("usage") if isinstance(body, dict) else None,
        hashlib.sha256(raw).hexdigest(), elapsed, text,
    ), False


def rehearse(url: str, eos: int, *, model: str | None = None, timeout: float = 30.0,
             transport: httpx.BaseTransport | None = None, headers: dict[str, str] | None = None) -> Rehearsal:
    """Send every probe once, in order, with no idle wait between them.

    Each probe's whole exchange is bounded by ``timeout`` (however slowly the server
    dribbles its reply) and its reply by 1 MiB. A probe that got no complete answer
    in time means the server is not answering: the probes after it are not sent (each
    recorded as "no answer, rerun", not sent), so a stalled server costs one timeout, not five.
    """
    import httpx

    from ..measure.transport import StampingTransport

    results: list[ProbeResult] = []
    stalled: str | None = None
    with httpx.Client(transport=transport or StampingTransport(), headers=headers) as client:
        for probe in probes(eos, model):
            if stalled is not None:
                detail = f"not sent: probe {stalled} got no answer within {timeout:g} s"
                results.append(_no_answer(probe, _request_bytes(probe)[1], detail, {"transport": detail}, 0.0))
                continue
            result, timed_out = _run_probe(client, url, probe, timeout)
            if timed_out:
                stalled = probe.name
            results.append(result)
    return Rehearsal(url, eos, tuple(results))


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


def responses_jsonl(rehearsal: Rehearsal) -> bytes:
    lines = []
    for r in rehearsal.results:
        lines.append(json.dumps({"probe": r.name, "status": r.status, "response_sha256": r.response_sha256,
                                 "body": r.response_text, "error": r.error if r.status is None else None},
                                sort_keys=True))
    return ("\n".join(lines) + "\n").encode()


def write_rehearsal(rehearsal: Rehearsal, out: Path) -> tuple[Path, Path, bytes]:
    """Write ``rehearsal.json`` and ``responses.jsonl`` (mode 0600) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    summary = out / "rehearsal.json"
    responses = out / "responses.jsonl"
    body = responses_jsonl(rehearsal)
    _write_private(responses, body)
    summary.write_text(json.dumps(rehearsal.to_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return summary, responses, body
