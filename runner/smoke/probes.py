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
``stop``             a stop string (a word of the probe's own T=0 reply) ends the reply right
                     before the string's first occurrence in what the reply generated; with
                     token ids, ``stop_token_ids`` likewise at a token; a reply that never
                     generated it leaves the stop *not exercised* (never a failure)
``eos``              ``allowed_token_ids = [EOS]`` ends after one token with ``finish_reason``
                     stop, and ``min_tokens`` holds that EOS back (a reply whose ids hold no
                     EOS: not exercised)
``lifecycle``        a stream cancelled mid-way, a client that disconnects after sending, and
                     a request past its deadline (its late reply left to arrive) each leave
                     the server healthy: its model list and a control request answer
===================  =====================================================================

Every T=0 request is greedy on every server kind tally knows (``GREEDY_NEUTRAL``: no
penalty, no top-k or top-p cut). A session given the runner's stop flag (``cancel``) sends
nothing once it is set and cuts the request in flight (its socket shut down): every probe
then ends within moments. Pure verdicts live beside the requests; the runner
(``runner.execution.smoke``) records each probe as one ``smoke.result`` event with the
exchanges as its evidence blob.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..plan.model import SMOKE_FAILURE_KIND, SMOKE_SCHEMA, Smoke
from ..rehearsal import GREEDY_NEUTRAL, not_sent
from ..rehearsal.probe import Probe, ProbeResult, send, token_count
from ..vocabulary import SmokeOutcome, SmokeProbe
from .greedy import Divergence, Emitted, comparable, emitted_of, first_divergence, judged

if TYPE_CHECKING:
    import httpx

__all__ = ["ProbeVerdict", "SmokeSession", "validate_schema"]

LIFECYCLE_TOKENS = 64   # the long request a lifecycle probe cuts
CANCEL_READ_BYTES = 64 << 10  # what the cancelled stream reads at most before it is closed
MIN_DEADLINE_S = 0.001        # the shortest deadline the late-reply request is given
DEADLINE_ATTEMPTS = 3         # a reply that beats its deadline is asked again with half of it
CANCEL_POLL_S = 0.05          # how often a request in flight looks at the stop flag
STOPPED = "not sent: the window was told to stop"


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
             evidence: dict[str, Any], unexercised: list[str] | None = None) -> ProbeVerdict:
    """A probe of several checks: ``fail`` naming every failed one, else ``not_exercised`` naming what
    the replies never gave a chance to test, else ``pass`` saying what held."""
    if failures:
        return ProbeVerdict(probe, "fail", f"{start}: " + "; ".join(failures), checks, evidence)
    if unexercised:
        return ProbeVerdict(probe, "not_exercised", f"{start}: not exercised: " + "; ".join(unexercised), checks,
                            evidence)
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

    def __init__(self, url: str, model: str, smoke: Smoke, *, transport: httpx.BaseTransport | None = None,
                 cancel: threading.Event | None = None) -> None:
        import httpx

        from ..measure.transport import StampingTransport

        self.url = url.rstrip("/")
        self.model = model
        self.smoke = smoke
        self.client = httpx.Client(transport=transport or StampingTransport())
        self.greedy_elapsed_s = 0.0
        self.cancel = cancel

    @property
    def stopped(self) -> bool:
        """The runner was told to stop: nothing more is sent."""
        return self.cancel is not None and self.cancel.is_set()

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less when the stop flag comes."""
        if self.cancel is None:
            time.sleep(seconds)
        else:
            self.cancel.wait(seconds)

    @contextlib.contextmanager
    def cuttable(self) -> Iterator[Callable[[socket.socket | None], None] | None]:
        """An ``on_socket`` for one request: its socket is shut down when the stop flag comes."""
        cancel = self.cancel
        if cancel is None:
            yield None
            return
        sockets: list[socket.socket] = []
        done = threading.Event()

        def cut() -> None:
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        def seen(sock: socket.socket | None) -> None:
            if sock is not None:
                sockets.append(sock)
                if cancel.is_set():
                    cut()

        def watch() -> None:
            while not done.is_set():
                if cancel.wait(CANCEL_POLL_S):
                    cut()
                    return

        watcher = threading.Thread(target=watch, name="tally-smoke-cut", daemon=True)
        watcher.start()
        try:
            yield seen
        finally:
            done.set()
            watcher.join(1.0)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> SmokeSession:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    def completion(self, max_tokens: int | None = None, **extra: Any) -> dict[str, Any]:
        """A T=0 completion of the smoke prompt, greedy on every server kind (``GREEDY_NEUTRAL``)."""
        s = self.smoke
        body: dict[str, Any] = {"model": self.model, "prompt": s.prompt, "max_tokens": max_tokens or s.max_tokens,
                                **GREEDY_NEUTRAL, "seed": s.seed, "stream": False}
        if s.compare == "token_ids":
            body["return_token_ids"] = True
        body.update(extra)
        return body

    def send(self, name: str, body: dict[str, Any], path: str = "/v1/completions",
             timeout: float | None = None) -> ProbeResult:
        probe = Probe(name, path, body, "an answer")
        if self.stopped:
            return not_sent(probe, STOPPED)
        with self.cuttable() as on_socket:
            result, _timed_out = send(self.client, self.url, probe, timeout or self.smoke.timeout_s, _answered,
                                      on_socket)
        return result

    def healthy(self, tag: str) -> tuple[bool, list[dict[str, Any]], str]:
        """The model list answers and a tiny control request comes back with a token."""
        from ..measure.bounds import fetch

        exchanges: list[dict[str, Any]] = []
        try:
            if self.stopped:
                raise RuntimeError(STOPPED)
            with self.cuttable() as on_socket:
                reply = fetch(self.client, "GET", self.url + "/v1/models", deadline_s=self.smoke.timeout_s,
                              max_bytes=1 << 20, what="the model list", on_socket=on_socket)
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

    def _reply(self, result: ProbeResult) -> Emitted | None:
        """What a T=0 reply emitted (greedy_check's stage: text where no ids come)."""
        if result.status != 200:
            return None
        emitted = emitted_of(_body(result), self.smoke.compare)
        if emitted is None and not self.smoke.declared:
            emitted = emitted_of(_body(result), "text")
        return emitted

    def greedy(self, start: str, reference: tuple[str, Emitted] | None) -> tuple[ProbeVerdict, Emitted | None]:
        """The start's T=0 continuation; compared with the reference's when there is one (near ties followed)."""
        s = self.smoke
        extra = {"logprobs": s.logprobs} if s.logprobs else {}
        result = self.send("greedy", self.completion(**extra))
        exchanges = [_exchange(result)]
        if extra and result.status is not None and result.status != 200:
            # logprobs where the server exposes them: one that refuses them is asked again without
            extra = {}
            result = self.send("greedy-no-logprobs", self.completion())
            exchanges.append(_exchange(result))
        self.greedy_elapsed_s = result.elapsed_s
        emitted = self._reply(result)
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
        evidence["reference"] = {"start": ref_start, "emitted": ref.to_json()}
        a, b = comparable(ref, emitted)
        first = first_divergence(a, b, s.near_tie_margin)
        checks: dict[str, Any] = {"identical": first is None, "basis": b.basis, "length": len(emitted.sequence),
                                  "reference_length": len(ref.sequence)}
        if first is None:
            evidence["divergence"] = {"position": None, "margin": None, "reference_continuation": [],
                                      "candidate_continuation": [], "divergences": [], "forced": []}
            return ProbeVerdict("greedy_identity", "pass", f"{start} emitted what {ref_start} emitted at T=0 "
                                f"({b.basis})", checks, evidence, ref_start), emitted
        found, segments, forced, unfollowed, answered = self._follow(a, b, first, extra, exchanges)
        verdict = judged(a, segments, found, unfollowed)
        evidence["divergence"] = {**verdict.to_json(), "forced": forced}
        summary = verdict.summary(ref_start, start, b.basis)
        margins = s.near_tie_margin is not None and first.margin is None
        if margins:  # a near tie cannot be told from a real divergence here
            summary += " (no logprobs here: a near tie cannot be told; compared as text)"
        checks.update({"divergences": len(found), "near_ties": sum(d.near_tie for d in found),
                       "compared": verdict.compared, "followed": len(forced), "logprobs": not margins})
        if unfollowed:
            checks["unfollowed"] = unfollowed
        outcome: SmokeOutcome = "near_tie" if verdict.near_tie and answered else "fail"
        if not answered:
            summary += f"; the near tie could not be followed: {unfollowed}"
        return ProbeVerdict("greedy_identity", outcome, summary, checks, evidence, ref_start, verdict.position,
                            verdict.margin), emitted

    def _follow(self, ref: Emitted, own: Emitted, first: Divergence, extra: Mapping[str, Any],
                exchanges: list[dict[str, Any]]) -> tuple[list[Divergence], list[tuple[int, Emitted]],
                                                           list[dict[str, Any]], str | None, bool]:
        """Follow near ties teacher-forced: the candidate continues from the reference's token at each one.

        Returns every divergence found, the candidate's segments (offset, what it emitted), the
        forced prefixes, why following stopped short (``None``: it did not) and whether every
        forced request was answered.
        """
        s = self.smoke
        found, segments = [first], [(0, own)]
        forced: list[dict[str, Any]] = []
        while found[-1].near_tie:
            p = found[-1].position
            if p + 1 >= len(ref.sequence):
                break                      # the reference ends there: nothing after it to compare
            if len(forced) >= s.follow:
                return found, segments, forced, f"the registered {s.follow} near tie(s) followed", True
            prompt = self._forced_prompt(ref, own, p)
            if prompt is None:
                why = "the server gave no prompt token ids to force a continuation with"
                return found, segments, forced, why, True
            forced.append({"offset": p + 1, "prompt": prompt})
            result = self.send(f"greedy-forced-{len(forced)}",
                               self.completion(len(ref.sequence) - p - 1, prompt=prompt, **extra))
            exchanges.append(_exchange(result))
            continued = self._reply(result)
            if continued is None or continued.basis != ref.basis:
                why = f"the forced continuation from position {p + 1} got {result.detail}"
                return found, segments, forced, why, False
            segments.append((p + 1, continued))
            after = first_divergence(ref, continued, s.near_tie_margin, offset=p + 1)
            if after is None:
                break
            found.append(after)
        return found, segments, forced, None, True

    def _forced_prompt(self, ref: Emitted, own: Emitted, position: int) -> list[int] | str | None:
        """The prompt with the reference's continuation through ``position`` (token ids, or texts)."""
        if ref.basis == "token_ids":
            return None if own.prompt_ids is None else [*own.prompt_ids, *ref.sequence[:position + 1]]
        if ref.basis == "token_text":
            return self.smoke.prompt + "".join(str(t) for t in ref.sequence[:position + 1])
        return None

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

    def stop(self, start: str) -> ProbeVerdict:
        """Stops judged on the replies themselves: the stop comes from this probe's own T=0 reply, and a
        reply passes when it ends where the stop first occurs in what it generated."""
        free = self.send("stop-free", self.completion())
        exchanges = [_exchange(free)]
        own = self._reply(free)
        if own is None:
            return ProbeVerdict("stop", "fail", f"{start}: no T=0 reply to take a stop from ({free.detail})",
                                {}, {"exchanges": exchanges})
        words = own.text.split()
        if len(words) < 3:
            return ProbeVerdict("stop", "not_exercised", f"{start}: not exercised: the T=0 reply is too short "
                                f"({len(words)} words) to place a stop in", {}, {"exchanges": exchanges})
        checks: dict[str, Any] = {}
        failures: list[str] = []
        unexercised: list[str] = []
        word = words[len(words) // 2]
        cut = self.send("stop-string", self.completion(stop=[word]))
        exchanges.append(_exchange(cut))
        verdict, why = _stop_string(cut, word, own.text)
        checks["stop_string"] = {"stop": word, "finish_reason": cut.finish_reason, "stop_reason": cut.stop_reason,
                                 "chars": len(cut.parts.get("text") or ""), "verdict": verdict,
                                 "ok": verdict == "pass"}
        (failures if verdict == "fail" else unexercised if verdict == "not_exercised" else []).append(why)
        if own.basis == "token_ids" and len(own.sequence) >= 3:
            token = own.sequence[len(own.sequence) // 2]
            ids = self.send("stop-token-ids", self.completion(stop_token_ids=[token]))
            exchanges.append(_exchange(ids))
            verdict, why = _stop_token(ids, token, own.sequence)
            checks["stop_token_ids"] = {"token": token, "completion_tokens": token_count(ids.parts),
                                        "finish_reason": ids.finish_reason, "verdict": verdict,
                                        "ok": verdict == "pass"}
            (failures if verdict == "fail" else unexercised if verdict == "not_exercised" else []).append(why)
        also = " and stop_token_ids" if len(checks) > 1 else ""
        return _checked("stop", start, failures, f"stop strings{also} end the reply where they first occur",
                        checks, {"exchanges": exchanges}, unexercised)

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
        ids = once.parts.get("token_ids")
        produced = None if not isinstance(ids, list) else eos in ids  # None: the server names no ids
        checks = {"eos_once": {"completion_tokens": count, "finish_reason": once.finish_reason,
                               "eos_generated": produced,
                               "ok": once.status == 200 and count == 1 and once.finish_reason == "stop"},
                  "min_tokens": {"completion_tokens": held_count, "finish_reason": held.finish_reason,
                                 "ok": held.status == 200 and held_count is not None and held_count >= 3}}
        failures = []
        unexercised = []
        if not checks["eos_once"]["ok"]:
            if once.status == 200 and produced is False:
                unexercised.append(f"allowed_token_ids=[{eos}] gave {count} token(s), none of them EOS")
            else:
                failures.append(f"allowed_token_ids=[{eos}] gave {count} token(s), finish {once.finish_reason} "
                                "(expected 1, stop)")
        if not checks["min_tokens"]["ok"]:
            failures.append(f"min_tokens 3 did not hold EOS back ({held_count} token(s))")
        evidence = {"exchanges": exchanges}
        return _checked("eos", start, failures, "EOS ends after one token; min_tokens holds it back", checks,
                        evidence, unexercised)

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
        if self.stopped:
            return {"status": None, "error": STOPPED}
        try:
            with self.cuttable() as on_socket, deadline_guard(began + self.smoke.timeout_s, on_socket), \
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
        if self.stopped:
            return {"sent": False, "error": STOPPED}
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
        self.pause(min(0.2, self.smoke.timeout_s / 10))
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
            self.pause(min(self.smoke.timeout_s / 4, max(0.05, self.greedy_elapsed_s * LIFECYCLE_TOKENS
                                                         / self.smoke.max_tokens)))
        return {"deadline_s": tried[-1], "deadlines_s": tried, "timed_out": timed_out, "status": result.status}


def _stop_string(reply: ProbeResult, word: str, free_text: str) -> tuple[SmokeOutcome, str]:
    """A reply asked to stop at ``word``: judged on what it generated (``free_text``: the probe's own reply
    without the stop, in the same conditions, tells where an ending right before the word came from)."""
    text = reply.parts.get("text")
    if reply.status != 200 or not isinstance(text, str):
        return "fail", f"the stop-string request got {reply.detail}"
    at = text.find(word)
    if at >= 0:
        return "fail", (f"stop string {word!r} occurs at character {at} of the reply, which runs on through it "
                        f"(finish {reply.finish_reason})")
    if reply.finish_reason == "stop" and (reply.stop_reason == word or free_text.startswith(text + word)):
        return "pass", f"stop string {word!r} ended the reply right before it ({len(text)} chars)"
    if reply.finish_reason == "stop":
        return "not_exercised", f"the reply ended (finish stop, {len(text)} chars) where it did not generate " \
                                f"{word!r}: another ending (EOS)"
    return "not_exercised", f"the reply never generated {word!r} (finish {reply.finish_reason}, {len(text)} chars)"


def _stop_token(reply: ProbeResult, token: Any, free: tuple[Any, ...]) -> tuple[SmokeOutcome, str]:
    """A reply asked to stop at ``token``: it ends at that token's first position in what it generated."""
    ids = reply.parts.get("token_ids")
    if reply.status != 200:
        return "fail", f"the stop_token_ids request got {reply.detail}"
    if not isinstance(ids, list):
        count = token_count(reply.parts)
        at = free.index(token)
        if reply.finish_reason == "stop" and count in (at, at + 1):
            return "pass", f"stop_token_ids [{token}] ended the stream at position {at}"
        return "not_exercised", f"stop_token_ids [{token}]: no token ids in the reply to tell where it ended " \
                                f"(finish {reply.finish_reason}, {count} tokens)"
    if token in ids:
        at = ids.index(token)
        if at + 1 < len(ids):
            return "fail", (f"stop_token_ids [{token}] generated at position {at}, and the stream ran on to "
                            f"{len(ids)} tokens (finish {reply.finish_reason})")
        if reply.finish_reason == "stop":
            return "pass", f"stop_token_ids [{token}] ended the stream at its first position {at}"
        return "not_exercised", f"stop_token_ids [{token}] came as the last token allowed (finish length)"
    if reply.finish_reason == "stop" and (reply.stop_reason == token or tuple(free[:len(ids) + 1]) ==
                                          (*ids, token)):
        return "pass", f"stop_token_ids [{token}] ended the stream at position {len(ids)}"
    return "not_exercised", f"the stream never generated token {token} (finish {reply.finish_reason}, " \
                            f"{len(ids)} tokens)"
