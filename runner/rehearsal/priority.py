"""Does the server schedule by ``priority``? The capability probe's reading of it (``docs/gates.md``).

vLLM reads ``priority`` under either scheduling policy (an object is refused, ``body.priority``)
and acts on it only when started with ``--scheduling-policy priority``; under the default
``fcfs`` it is accepted and ignored. Two readings, the first that answers:

1. **What the server reports**: ``GET /server_info?config_format=json`` (vLLM's
   development mode, ``VLLM_SERVER_DEV_MODE=1``), ``vllm_config.scheduler_config.policy``.
   Only that one string is kept from the reply (it also carries the server's environment).
2. **Behaviour** (``priority-order``), when nothing is reported. Order of arrival cannot
   decide it (vLLM's API server hands requests to the engine out of send order by up to
   0.5 s under load), so the probe makes requests *wait* and watches who is served first:
   :data:`HOLDERS` streams with long prompts (half the server's ``max_model_len``, at
   most :data:`MAX_HOLDER_WORDS` words, a nonce first so that no prefix cache serves
   them) and one output token each, at priority :data:`HOLD`, fill the engine's prefill
   budget for several steps (vLLM fills a step's leftover budget with whatever waiting
   request fits, so the holders still waiting when the pair is first considered must
   exceed a step's budget: nine of about 1,000 tokens against vLLM's CPU server's 2,048);
   once every holder's reply has begun (the server took it in: the pair cannot reach the
   engine before them) or one was served, a ``high`` (:data:`HIGH`, the rehearsal's own
   priority) and a ``low`` (:data:`LOW`) request of one token are sent back to back.
   Under ``priority`` the high one is taken before the holders still waiting and the low
   one after all of them; under ``fcfs`` both wait behind every holder, whichever order
   they arrive in.

   A trial reads, with ``margin`` a quarter of the largest gap between consecutive
   first tokens (the engine's step: outputs of one step reach the client together):
   ``priority`` when a holder's first token came more than ``margin`` after the high
   one's, none after the low one's, and the low one more than ``margin`` after the high
   one; ``fcfs`` when no holder's came more than ``margin`` after either, while at
   least two holders, ``margin`` apart, got theirs after the pair was sent (the pair
   waited behind a queue); anything else ``unclear``. :data:`TRIALS` trials, the pair
   sent high-first then low-first: ``honoured`` when every trial reads ``priority``,
   ``ignored`` when every one reads ``fcfs``, else ``unclear`` (a plan that registers a
   priority then fails the probe: fail closed).

The trials run only for a plan that registers a priority (they put a few thousand
prompt tokens on production's queue); otherwise, with nothing reported, the reading is
``unclear`` (read, its scheduling not probed). No probe here outranks the rehearsal's
priority 10 (a lower value is served first): the holders run at 20, the low request at
30. The probe is bounded: a 1 MiB reply cap per request, and every request of a trial
within :data:`TRIAL_TIMEOUTS` probe timeouts (a loaded 2-core CPU engine took 17 s to
give two holders their first token). On a server whose one step takes every holder at
once (a large prefill budget, a fast engine) nothing waits: ``unclear``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .probe import PRIORITY, ProbeResult, has_choice

if TYPE_CHECKING:
    import httpx

__all__ = ["HIGH", "HOLD", "HOLDERS", "LOW", "MAX_HOLDER_WORDS", "PROBE_NAME", "TRIALS", "Trial", "TrialReading",
           "probe_priority", "read_trial", "reported_policy"]

PROBE_NAME = "priority-order"
HOLDERS = 9
MAX_HOLDER_WORDS = 4096
DEFAULT_HOLDER_WORDS = 1024     # when the server does not report its max_model_len
TRIALS = 2
TRIAL_TIMEOUTS = 10             # a trial's bound, in probe timeouts
HIGH, HOLD, LOW = PRIORITY, PRIORITY + 10, PRIORITY + 20
MIN_MARGIN_S = 0.005
INFO_BYTES = 4 << 20            # /server_info carries the server's whole environment
TrialReading = Literal["priority", "fcfs", "unclear"]


@dataclass(frozen=True)
class Trial:
    """One trial's first-token times (seconds after the holders were sent; ``None``: none came)."""

    order: tuple[str, str]              # the pair's send order
    holders_s: tuple[float | None, ...]
    pair_sent_s: float | None
    high_s: float | None
    low_s: float | None
    failures: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        reading, detail = read_trial(self)
        return {"order": list(self.order), "holders_s": [_r(t) for t in self.holders_s],
                "pair_sent_s": _r(self.pair_sent_s), "high_s": _r(self.high_s), "low_s": _r(self.low_s),
                "failures": list(self.failures), "reading": reading, "detail": detail}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def read_trial(trial: Trial) -> tuple[TrialReading, str]:
    """``priority``, ``fcfs`` or ``unclear``, with why (module docstring)."""
    if trial.failures:
        return "unclear", "; ".join(trial.failures)[:300]
    holders = [t for t in trial.holders_s if t is not None]
    high, low, sent = trial.high_s, trial.low_s, trial.pair_sent_s
    if high is None or low is None or sent is None or len(holders) != len(trial.holders_s):
        return "unclear", "a request gave no first token"
    times = sorted([*holders, high, low])
    margin = max(MIN_MARGIN_S, max(b - a for a, b in itertools.pairwise(times)) / 4)
    after_high = sum(1 for t in holders if t > high + margin)
    after_low = sum(1 for t in holders if t > low + margin)
    waited = sorted(t for t in holders if t > sent + margin)
    steps = bool(waited) and waited[-1] - waited[0] > margin
    facts = (f"{after_high} holder(s) served after high, {after_low} after low, low {low - high:+.3f} s from "
             f"high, {len(waited)} holder(s) served after the pair was sent (margin {margin:.3f} s)")
    if after_high >= 1 and after_low == 0 and low - high > margin:
        return "priority", facts
    if after_high == 0 and after_low == 0 and len(waited) >= 2 and steps:
        return "fcfs", facts
    return "unclear", facts


def reading(trials: Sequence[Trial]) -> tuple[Literal["honoured", "ignored", "unclear"], str]:
    """The field's status from every trial: the same reading each time, or ``unclear``."""
    readings = [read_trial(t) for t in trials]
    kinds = {r for r, _ in readings}
    detail = "; ".join(f"trial {i + 1} ({'-'.join(t.order)} sent): {r} ({d})"
                       for i, (t, (r, d)) in enumerate(zip(trials, readings, strict=True)))
    if kinds == {"priority"}:
        return "honoured", f"{PROBE_NAME}: the high-priority request was served before waiting holders in every " \
                           f"trial: {detail}"
    if kinds == {"fcfs"}:
        return "ignored", f"{PROBE_NAME}: the high-priority request waited behind every holder in every trial " \
                          f"(first come first served): {detail}"
    return "unclear", f"{PROBE_NAME}: the trials do not agree on one reading: {detail}"


# --------------------------------------------------------------------------- what the server reports


def reported_policy(client: httpx.Client, url: str, timeout: float) -> str | None:
    """``scheduler_config.policy`` from ``/server_info`` (vLLM's development mode), or ``None``."""
    import httpx

    from ledger.errors import FormatError
    from ledger.strictjson import read_json

    from ..measure import ReplyRefused, fetch

    try:
        reply = fetch(client, "GET", url.rstrip("/") + "/server_info?config_format=json", deadline_s=timeout,
                      max_bytes=INFO_BYTES, what="the /server_info reply")
        if reply.status != 200:
            return None
        body = read_json(reply.body, "the /server_info reply", max_bytes=INFO_BYTES)
    except (httpx.HTTPError, OSError, ReplyRefused, FormatError):
        return None
    config = body.get("vllm_config") if isinstance(body, dict) else None
    scheduler = config.get("scheduler_config") if isinstance(config, dict) else None
    policy = scheduler.get("policy") if isinstance(scheduler, dict) else None
    return policy if policy in ("fcfs", "priority") else None


def max_model_len(client: httpx.Client, url: str, timeout: float) -> int | None:
    """The served model's ``max_model_len`` from ``/v1/models`` (vLLM reports it), or ``None``."""
    import httpx

    from ledger.errors import FormatError
    from ledger.strictjson import read_json

    from ..measure import MAX_PROBE_BYTES, ReplyRefused, fetch

    try:
        reply = fetch(client, "GET", url.rstrip("/") + "/v1/models", deadline_s=timeout, max_bytes=MAX_PROBE_BYTES,
                      what="the /v1/models reply")
        body = read_json(reply.body, "the /v1/models reply", max_bytes=MAX_PROBE_BYTES) if reply.status == 200 \
            else None
    except (httpx.HTTPError, OSError, ReplyRefused, FormatError):
        return None
    data = body.get("data") if isinstance(body, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    value = first.get("max_model_len")
    return value if type(value) is int and value > 0 else None


# --------------------------------------------------------------------------- behaviour


class _Stream:
    """One streamed request in its own thread: when its first content frame came, and what went wrong."""

    def __init__(self, client: httpx.Client, url: str, body: dict[str, Any], timeout: float, t0: float,
                 first: threading.Event | None = None) -> None:
        self.client, self.url, self.body, self.timeout, self.t0 = client, url, body, timeout, t0
        self.first_s: float | None = None
        self.failure: str | None = None
        self.first = first or threading.Event()   # set at the first content frame (or the end); may be shared
        self.headers = threading.Event()           # the reply's status line and headers came (or the end)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> _Stream:
        self.thread.start()
        return self

    def _run(self) -> None:
        import httpx

        from ..measure import MAX_PROBE_BYTES, ReplyRefused, SSEDecoder, SSEOverflow, deadline_guard

        deadline = time.perf_counter() + self.timeout
        data = json.dumps(self.body, separators=(",", ":")).encode()
        try:
            with deadline_guard(deadline, None), \
                    self.client.stream("POST", self.url, content=data, timeout=httpx.Timeout(self.timeout),
                                       headers={"content-type": "application/json",
                                                "accept-encoding": "identity"}) as response:
                self.headers.set()
                if response.status_code != 200:   # its body is not read
                    self.failure = f"HTTP {response.status_code}"
                    return
                size, decoder = 0, SSEDecoder(max_line=MAX_PROBE_BYTES)
                for raw in response.iter_raw():
                    size += len(raw)
                    if size > MAX_PROBE_BYTES:
                        raise ReplyRefused("the stream is over the 1 MiB limit")
                    if self.first_s is None and any(_has_choice(frame) for frame in decoder.feed(raw)):
                        self.first_s = time.perf_counter() - self.t0   # the first frame with a choice: the token
                        self.first.set()
                    if time.perf_counter() > deadline:
                        raise httpx.ReadTimeout("overall deadline passed", request=response.request)
                if self.first_s is None:
                    self.failure = "no content frame"
        except (httpx.HTTPError, OSError, ReplyRefused, SSEOverflow) as exc:
            self.failure = f"{type(exc).__name__}: {exc}"[:200]
        finally:
            self.headers.set()
            self.first.set()

    def join(self, until: float) -> None:
        self.thread.join(max(0.0, until - time.perf_counter()))
        if self.thread.is_alive() and self.failure is None:
            self.failure = "no complete answer in time"


def _has_choice(frame: str) -> bool:
    """An SSE frame that carries a choice (a token), read as hostile input."""
    from ledger.errors import FormatError
    from ledger.strictjson import read_json

    from ..measure import MAX_PROBE_BYTES

    if frame.strip() == "[DONE]":
        return False
    try:
        return has_choice(read_json(frame, "an SSE frame", max_bytes=MAX_PROBE_BYTES))
    except FormatError:
        return False


def _trial(client: httpx.Client, url: str, model: str | None, words: int, order: tuple[str, str],
           timeout: float) -> Trial:
    base: dict[str, Any] = {"max_tokens": 1, "temperature": 0, "stream": True}
    if model:
        base["model"] = model
    endpoint = url.rstrip("/") + "/v1/completions"
    t0 = time.perf_counter()
    busy = threading.Event()   # some holder's first token: the engine is on the holders, the rest wait
    holders = [_Stream(client, endpoint, {**base, "priority": HOLD,
                                          "prompt": f"Probe {uuid.uuid4().hex[:12]} holder {i}:" + " the" * words},
                       timeout, t0, busy).start() for i in range(HOLDERS)]
    until = t0 + timeout
    for holder in holders:   # every holder's reply begun (the server took it in), or some holder already served
        while not holder.headers.wait(0.01) and not busy.is_set() and time.perf_counter() < until:
            pass
    sent = time.perf_counter() - t0
    pair = {name: _Stream(client, endpoint, {**base, "priority": HIGH if name == "high" else LOW,
                                             "prompt": f"Probe {uuid.uuid4().hex[:12]}: reply with one word."},
                          timeout, t0) for name in order}
    for name in order:
        pair[name].start()
    for stream in (*holders, *pair.values()):
        stream.join(until)
    failures = tuple(f"{name}: {s.failure}" for name, s in
                     [*((f"holder {i}", h) for i, h in enumerate(holders)), *pair.items()] if s.failure)
    return Trial(order, tuple(h.first_s for h in holders), sent, pair["high"].first_s, pair["low"].first_s,
                 failures)


def probe_priority(client: httpx.Client, url: str, model: str | None, timeout: float, *,
                   behaviour: bool = True) -> ProbeResult:
    """The ``priority-order`` probe's result: the reported policy, else (``behaviour``) the trials.

    Each trial is bounded by :data:`TRIAL_TIMEOUTS` x ``timeout`` (a loaded CPU engine takes
    tens of seconds over the holders' prompts). Without ``behaviour`` (no need for it: the
    trials fill the engine's queue) and nothing reported, the reading is ``unclear``.
    """
    began = time.perf_counter()
    policy = reported_policy(client, url, timeout)
    parts: dict[str, Any] = {"reported_policy": policy, "trials": []}
    request: dict[str, Any] = {"server_info": "/server_info?config_format=json", "max_tokens": 1}
    if policy is None and not behaviour:
        status, detail = "unclear", f"{PROBE_NAME} not run: nothing reported (/server_info), and the behaviour " \
                                    "probe (which fills the engine's queue) runs only for a plan that registers " \
                                    "a priority"
    elif policy is None:
        length = max_model_len(client, url, timeout)
        words = DEFAULT_HOLDER_WORDS if length is None else max(16, min(MAX_HOLDER_WORDS, length // 2 - 32))
        request.update(holders=HOLDERS, holder_words=words, holder_priority=HOLD, high=HIGH, low=LOW,
                       trials=TRIALS, max_model_len=length)
        orders: Sequence[tuple[str, str]] = [("high", "low"), ("low", "high")][:TRIALS]
        trials = [_trial(client, url, model, words, order, TRIAL_TIMEOUTS * timeout) for order in orders]
        parts["trials"] = [t.to_json() for t in trials]
        status, detail = reading(trials)
    else:
        status = "honoured" if policy == "priority" else "ignored"
        detail = f"/server_info: scheduler_config.policy {policy!r}"
    parts["status"], parts["probed"] = status, policy is not None or behaviour
    digest = hashlib.sha256(json.dumps(request, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return ProbeResult(PROBE_NAME, "/v1/completions", request, digest, 200, True, "pass", None, detail, None, None,
                       None, None, None, time.perf_counter() - began, None, parts)


def priority_reading(result: ProbeResult | None) -> tuple[str, str, str] | None:
    """(status, detail, basis) from the probe's result, or ``None`` when it was not sent."""
    if result is None:
        return None
    parts: Mapping[str, Any] = result.parts
    status = parts.get("status")
    if status not in ("honoured", "ignored", "unclear"):
        return None
    basis = "server report" if parts.get("reported_policy") is not None else \
        "behaviour" if parts.get("probed") else "type check"
    return str(status), result.detail, basis
