"""The capability probe (``docs/gates.md``): does the server honour, ignore or refuse each request field?

A server that does not know a field may refuse it (HTTP 400 on a valid value) or drop
it silently and answer 200 (llama-cpp-python's ``llama_cpp.server``: pydantic drops the
fields it does not declare). Only behaviour tells the second from honouring, so every
field has a probe that comes out differently when the field is ignored:

================================  ===================================================  ==========
field                             honoured when                                        basis
================================  ===================================================  ==========
``max_tokens``                    ``baseline`` (a counting prompt, max_tokens 4)       behaviour
                                  generates 4 tokens, not more
``seed``                          ``seed-a`` and ``seed-b`` (same seed, T=1) agree     behaviour
                                  and ``seed-c`` (another seed) differs
``allowed_token_ids``             ``allowed-eos`` (the baseline with                   behaviour
                                  ``allowed_token_ids: [EOS]``) stops at once where
                                  the baseline ran to length
``logit_bias``                    ``bias-eos`` (the baseline with ``{EOS: 100}``)      behaviour
                                  stops at once; refused when the ``control`` got a
                                  4xx (vLLM under speculative decoding)
``ignore_eos``                    ``ignore-eos`` (EOS forced, ``ignore_eos``) runs     behaviour
                                  to ``length``
``stop_token_ids``                ``stop-token-ids`` (token T forced, stop on T)       behaviour
                                  stops
``return_token_ids``              ``token-ids`` carries ``token_ids``                  behaviour
``stream_options.include_usage``  ``usage`` (a stream) carries usage                   behaviour
``priority``                      read (``priority-type``, a JSON object, is refused)  server report
                                  and scheduled by: ``/server_info``'s policy, else    or behaviour
                                  ``priority-order`` (:mod:`.priority`)
``cache_salt``                    ``cache-salt-type`` (a JSON object) is refused       type check
``min_tokens``                    ``min-tokens`` (EOS forced, ``min_tokens`` 3) runs   behaviour
                                  on for 3 tokens
``stop``                          ``stop-string`` (a word of ``stop-reference``, the   behaviour
                                  T=0 baseline) ends the text right before that word
``structured_outputs``            ``structured-outputs`` (vLLM's ``{"json": schema}``  behaviour
                                  on the counting prompt) answers the schema's value
``guided_json``                   ``guided-json`` (vLLM before v0.12) likewise         behaviour
``response_format``               ``response-format`` (chat, llama-cpp-python's        behaviour
                                  ``json_object`` with a ``schema``) likewise
``repetition_penalty``            ``repetition-penalty`` (a strong multiplicative      behaviour
                                  penalty, under vLLM's name ``repetition_penalty``
                                  and llama-cpp-python's ``repeat_penalty``) changes
                                  the T=0 answer of ``penalty-neutral`` (a repetitive
                                  prompt, every penalty neutral)
``presence_penalty``              ``presence-penalty`` likewise                        behaviour
``frequency_penalty``             ``frequency-penalty`` likewise                       behaviour
``reasoning_effort``              ``reasoning-effort-type`` (an object) is refused     type check
                                  and ``reasoning-effort`` (``"low"``) answered 200,
                                  on ``/v1/chat/completions`` (vLLM reads it there
                                  only; a plan registering it measures over chat)
``top_k``                         ``top-k-type`` likewise (``top-k``: 1)               type check
``min_p``                         ``min-p-type`` likewise (``min-p``: 0.05; vLLM       type check
                                  refuses it under speculative decoding)
================================  ===================================================  ==========

The three penalties are what makes a T=0 request greedy or not: every T=0 smoke request
sends them neutral (:data:`GREEDY_NEUTRAL`), and a server that acts on a strong value
acts on the neutral one too. One that answers a strong value as it answers the neutral
one does not read the field, so its own default stays (llama-cpp-python's
``repeat_penalty`` is 1.1): the smoke stage's greedy identity needs ``repetition_penalty``
honoured, and the other two, 0 by default on every server kind tally knows, accepted
(a presence penalty of 2.0, vLLM's maximum, leaves SmolLM2's T=0 answer unchanged on
llama.cpp: "not read" and "too weak to show" look alike there).

Forcing is read against the baseline's own ending, never from a prompt a model may end
by itself (the admission's ``terminator``, "Stop here.", stops at once on a small model
whether or not ``allowed_token_ids`` is honoured). ``ignore-eos`` and ``stop-token-ids``
force their token with ``allowed_token_ids`` when ``allowed-eos`` showed it works, else
with ``logit_bias`` when ``bias-eos`` did; with neither they are not sent and the fields
are ``unclear`` (``min-tokens`` likewise). The structured-output schema admits one value,
the string ``"tally"``: a server that honours the field can answer nothing else, one that
drops it goes on counting. A *type check* shows the server reads the field, not that it acts on it
(a prefix-cache hit is not observable in a tiny probe). ``priority`` starts with one: a
server that does not read it ignores it; one that does (vLLM reads it under either
scheduling policy, and without ``--scheduling-policy priority`` schedules first come
first served) is asked what it schedules by (:mod:`.priority`: the policy the server
reports, else whether a high-priority request overtakes waiting ones).

Statuses: ``honoured``, ``ignored``, ``refused`` (a valid value answered 4xx while the
``baseline``, which carries none of these fields, answered 200), ``unclear`` (the probe
could not tell) and ``no_answer`` (5xx, transport error, timeout or not sent).

What a window needs (:func:`plan_needs`): each :class:`Need` says what the field must
be (``honoured``; ``refused`` for the vLLM control; ``accepted``, i.e. not refused, for
a field tally's waves send whose effect the plan does not rely on) and why.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .probe import MAX_TOKENS, Outcome, Probe, ProbeResult, error_of, token_count

if TYPE_CHECKING:
    from ..plan.model import Plan

__all__ = [
    "FIELDS",
    "GREEDY_NEUTRAL",
    "FieldResult",
    "Need",
    "Status",
    "Want",
    "assess",
    "assess_logit_bias",
    "capability_probes",
    "engine_needs",
    "engine_refusals",
    "forced_probes",
    "judge_answered",
    "plan_needs",
    "priority_read",
    "smoke_needs",
    "smoke_refusals",
    "stop_word",
    "structured_probes",
    "typed_probes",
    "vllm_needs",
]

FIELDS: tuple[str, ...] = (
    "seed", "ignore_eos", "max_tokens", "priority", "cache_salt", "allowed_token_ids", "stop_token_ids",
    "return_token_ids", "stream_options.include_usage", "logit_bias", "min_tokens", "stop",
    "structured_outputs", "guided_json", "response_format", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "reasoning_effort", "top_k", "min_p",
)
Status = Literal["honoured", "ignored", "refused", "unclear", "no_answer"]
Want = Literal["honoured", "refused", "accepted"]
Basis = Literal["behaviour", "type check", "server report"]

BASELINE_TOKENS = 4
SEED, OTHER_SEED = 4242, 4243
FORCED_TOKEN = 1000          # an ordinary id in any real vocabulary (not a special token)
COUNT_PROMPT = "Count from one to one hundred: one, two, three,"
OPEN_PROMPT = "Write eight random, unrelated words:"
WRONG_TYPE = {"tally": "a JSON object: not an integer, a string or a boolean"}
MIN_TOKENS = 3
STRUCTURED_VALUE = "tally"
STRUCTURED_SCHEMA: Mapping[str, Any] = {"type": "string", "enum": [STRUCTURED_VALUE]}
STRUCTURED_PROBES: Mapping[str, str] = {"structured_outputs": "structured-outputs", "guided_json": "guided-json",
                                        "response_format": "response-format"}
# What makes a T=0 request pick the raw top-1 on every server kind tally knows: no penalty under
# any of their names (vLLM's ``repetition_penalty``, llama-cpp-python's ``repeat_penalty``, whose
# default is 1.1), no top-k or top-p cut (vLLM: top_k 0 disables it; llama.cpp: top_k <= 0).
# A server ignores the names it does not know (vLLM and llama-cpp-python both do).
GREEDY_NEUTRAL: Mapping[str, Any] = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0,
                                     "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
REPEAT_PROMPT = "one one one one one one one one one one one one"
STRONG_PENALTIES: Mapping[str, Mapping[str, float]] = {
    "repetition_penalty": {"repetition_penalty": 5.0, "repeat_penalty": 5.0},
    "presence_penalty": {"presence_penalty": 2.0},
    "frequency_penalty": {"frequency_penalty": 2.0},
}
PENALTY_PROBES: Mapping[str, str] = {"repetition_penalty": "repetition-penalty",
                                     "presence_penalty": "presence-penalty", "frequency_penalty": "frequency-penalty"}
# Engine-side sampling fields a plan may register that are type-checked: (probe, a valid value). The
# valid value must be answered 200 (a 4xx is a refusal: vLLM refuses min_p under speculative decoding);
# the same probe with an object must be refused by a server that reads the field.
CHAT_FIELDS = frozenset({"reasoning_effort"})   # engine fields a server reads on chat completions only
TYPED_FIELDS: Mapping[str, tuple[str, Any]] = {"reasoning_effort": ("reasoning-effort", "low"),
                                               "top_k": ("top-k", 1), "min_p": ("min-p", 0.05)}


@dataclass(frozen=True)
class Need:
    """A field a window relies on: what it must be and why."""

    field: str
    want: Want
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "want": self.want, "reason": self.reason}


def plan_needs(plan: Plan) -> tuple[Need, ...]:
    """The fields a registered plan's waves rely on, from its sampling and what tally's waves send.

    Every wave request carries ``max_tokens``, ``seed``, ``ignore_eos``, a fresh
    ``cache_salt``, ``stream_options.include_usage`` and ``return_token_ids``, and
    ``priority`` when it is not 0 (``runner/measure/wave.py``).
    """
    s = plan.sampling
    needs = [Need("max_tokens", "honoured", f"every wave asks for max_tokens {s.max_tokens}")]
    if s.temperature > 0:
        needs.append(Need("seed", "honoured", f"waves are seeded (seed_base {s.seed_base} + wave) at temperature "
                                              f"{s.temperature:g}: every start draws the same"))
    else:
        needs.append(Need("seed", "accepted", "tally's waves send it (greedy sampling does not rely on it)"))
    if s.ignore_eos:
        needs.append(Need("ignore_eos", "honoured", "forced length (ignore_eos = true): every request must run "
                                                    "to max_tokens"))
    else:
        needs.append(Need("ignore_eos", "accepted", "tally's waves send ignore_eos = false"))
    if s.priority:
        needs.append(Need("priority", "honoured", f"the plan registers priority {s.priority}"))
    needs.append(Need("cache_salt", "honoured", "every stream carries a fresh cache_salt: no request may reuse "
                                                "another's prefix cache (cold prefill and TTFT)"))
    needs.append(Need("stream_options.include_usage", "honoured",
                      "delivered tokens come from the stream's final usage chunk"))
    if plan.measurement.keep_token_ids:
        needs.append(Need("return_token_ids", "honoured",
                          "the plan keeps each wave request's emitted token ids (keep_token_ids = true)"))
    else:
        needs.append(Need("return_token_ids", "accepted",
                          "tally's waves send it (tokens per chunk); a refusal would fail every request"))
    needs += engine_needs(plan)
    smoke = {n.field: n for n in smoke_needs(plan)}
    merged = [Need(n.field, "honoured", f"{n.reason}; and {smoke.pop(n.field).reason}") if n.field in smoke else n
              for n in needs]
    return tuple(merged) + tuple(smoke.values())


def engine_needs(plan: Plan) -> tuple[Need, ...]:
    """The engine-side sampling fields the plan registers (``[sampling]``): each sent with the identical
    value on every request, so the server must act on it (one that drops it measures its own default)."""
    return tuple(Need(name, "honoured", f"the plan registers {name} = {value!r}, sent with every request of "
                                        "both arms: a server that drops it measures its own default")
                 for name, value in plan.sampling.engine_fields.items())


def engine_refusals(plan: Plan, fields: Mapping[str, Any] | None) -> list[str]:
    """The plan's engine-side sampling fields the recorded capability probe (``fields``: field -> status)
    found not honoured, or found nothing of (no probe recorded: nothing is known, so it is refused too)."""
    registered = plan.sampling.engine_fields
    if not registered:
        return []
    if not fields:
        return [f"the plan registers {', '.join(registered)}, and no capability probe is recorded for the window: "
                "run `tally gate rehearsal --window` first (find out before touching production)"]
    return [f"the plan registers {name} = {value!r}, and the capability probe found it "
            f"{str(fields.get(name) or 'not probed').replace('_', ' ')} on this server: every request would "
            "measure the server's own default"
            for name, value in registered.items() if fields.get(name) != "honoured"]


def smoke_needs(plan: Plan) -> tuple[Need, ...]:
    """The fields the plan's declared smoke probes rely on (``docs/smoke.md``)."""
    smoke = plan.smoke
    if smoke is None or not smoke.declared:  # the stage greedy_check implies is reported, never a gate
        return ()
    needs: list[Need] = []
    if smoke.compare == "token_ids" and ("greedy_identity" in smoke.probes or "stop" in smoke.probes):
        needs.append(Need("return_token_ids", "honoured", "the smoke stage compares emitted token ids "
                                                          '(declare compare = "text" on a server that gives none)'))
    if "stop" in smoke.probes:
        needs.append(Need("stop", "honoured", "the smoke stage's stop probe ends a stream on a stop string"))
    if "stop" in smoke.probes and smoke.compare == "token_ids":
        needs.append(Need("stop_token_ids", "honoured", "the smoke stage's stop probe ends a stream on a token id"))
    if "eos" in smoke.probes:
        needs.append(Need("allowed_token_ids", "honoured", "the smoke stage's eos probe forces EOS with "
                                                           "allowed_token_ids"))
        needs.append(Need("min_tokens", "honoured", "the smoke stage's eos probe holds EOS back with min_tokens"))
    if "structured" in smoke.probes:
        needs.append(Need(smoke.structured_field, "honoured", "the smoke stage's structured probe constrains its "
                                                              f"answer with {smoke.structured_field}"))
    if "greedy_identity" in smoke.probes:
        needs.append(Need("repetition_penalty", "honoured", "greedy identity compares raw top-1 tokens: every T=0 "
                                                            "smoke request sets the repeat penalty neutral, which a "
                                                            "server that does not read it leaves at its own default "
                                                            "(llama-cpp-python: repeat_penalty 1.1)"))
        needs += [Need(name, "accepted", f"every T=0 smoke request sets {name} neutral (0, every known server's "
                                         "default; a strong 2.0, vLLM's maximum, need not change a tiny model's "
                                         "T=0 answer)") for name in ("presence_penalty", "frequency_penalty")]
    return tuple(needs)


def smoke_refusals(plan: Plan, fields: Mapping[str, Any] | None) -> list[str]:
    """Smoke probes the recorded capability probe (``fields``: field -> status) shows this server cannot run."""
    if not fields:
        return []
    return [f"the smoke stage relies on {need.field} ({need.reason}), and the capability probe found it "
            f"{fields[need.field]} on this server: drop the probe or register what the server honours"
            for need in smoke_needs(plan)
            if fields.get(need.field) == "refused" or (need.want == "honoured" and fields.get(need.field) == "ignored")]


def vllm_needs(*, control_answered: bool = False) -> tuple[Need, ...]:
    """The vLLM checks of seed 000's admission: the terminator probe and the R16 control.

    ``control_answered``: the control came back 200 (a production without speculative
    decoding accepts ``logit_bias``): then the check is that the server acts on it.
    """
    if control_answered:
        bias = Need("logit_bias", "honoured", "vLLM check (control): the control was answered 200 (no speculative "
                                              "decoding here), so the server must act on logit_bias")
    else:
        bias = Need("logit_bias", "refused", "vLLM check (control): refused under speculative decoding, the R16 cause")
    return (
        Need("allowed_token_ids", "honoured", "vLLM check: the admission's terminator probe forces EOS with it"),
        bias,
    )


# --------------------------------------------------------------------------- the requests


def _bases(model: str | None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(baseline, seeded, plain) request bodies: nothing optional unless the probe adds it."""
    base: dict[str, Any] = {"stream": False}
    if model:
        base["model"] = model
    baseline = {**base, "prompt": COUNT_PROMPT, "max_tokens": BASELINE_TOKENS}
    seeded = {**base, "prompt": OPEN_PROMPT, "max_tokens": MAX_TOKENS, "temperature": 1.0, "top_p": 1.0}
    plain = {**base, "prompt": "Reply with one short word.", "max_tokens": MAX_TOKENS}
    return baseline, seeded, plain


def capability_probes(eos: int, model: str | None, results: Mapping[str, ProbeResult]) -> tuple[Probe, ...]:
    """The capability requests sent after the admission's five (the control's refusal spares one)."""
    baseline, seeded, plain = _bases(model)
    probes = [
        Probe("baseline", "/v1/completions", baseline,
              f"HTTP 200 with {BASELINE_TOKENS} tokens (max_tokens honoured; the reference for refusals)"),
        Probe("allowed-eos", "/v1/completions", {**baseline, "allowed_token_ids": [eos]},
              "finish_reason stop at once, where the baseline ran on (EOS forced by allowed_token_ids)"),
    ]
    control = results.get("control")
    if control is None or control.status is None or not 400 <= control.status < 500:
        probes.append(Probe("bias-eos", "/v1/completions", {**baseline, "logit_bias": {str(eos): 100}},
                            "finish_reason stop at once, where the baseline ran on (EOS forced by logit_bias)"))
    probes += [
        Probe("seed-a", "/v1/completions", {**seeded, "seed": SEED}, "HTTP 200"),
        Probe("seed-b", "/v1/completions", {**seeded, "seed": SEED}, "the same output as seed-a (same seed)"),
        Probe("seed-c", "/v1/completions", {**seeded, "seed": OTHER_SEED}, "another output (another seed)"),
        Probe("priority-type", "/v1/completions", {**plain, "priority": WRONG_TYPE},
              "HTTP 4xx: a server that reads priority refuses an object"),
        Probe("cache-salt", "/v1/completions", {**baseline, "cache_salt": f"tally-probe-{uuid.uuid4().hex}"},
              "HTTP 200"),
        Probe("cache-salt-type", "/v1/completions", {**baseline, "cache_salt": WRONG_TYPE},
              "HTTP 4xx: a server that reads cache_salt refuses an object"),
        Probe("token-ids", "/v1/completions", {**baseline, "return_token_ids": True}, "HTTP 200 with token_ids"),
        Probe("usage", "/v1/completions",
              {**baseline, "stream": True, "stream_options": {"include_usage": True}},
              "a stream ending with a usage chunk"),
        Probe("stop-reference", "/v1/completions", _greedy(baseline, MAX_TOKENS),
              "HTTP 200: the T=0 text the stop string is taken from"),
        *structured_probes(model),
        *penalty_probes(model),
    ]
    return tuple(probes)


def typed_probes(model: str | None, fields: Collection[str]) -> tuple[Probe, ...]:
    """Per type-checked engine field (:data:`TYPED_FIELDS`) among ``fields`` (those the window registers): a
    valid value, then an object. Sent last, and only when registered: vLLM 0.32's n-gram engine on CPU answers
    ``top_k`` with HTTP 500 and then nothing else, so a probe of a field no plan sends must not cost the rest."""
    _, _, plain = _bases(model)
    out: list[Probe] = []
    chat = {k: v for k, v in plain.items() if k != "prompt"} | {"messages": [{"role": "user",
                                                                              "content": COUNT_PROMPT}]}
    for field, (name, valid) in TYPED_FIELDS.items():
        if field not in fields:
            continue
        # reasoning_effort is read on chat completions only (vLLM): a plan registering it sends its waves there
        path, body = ("/v1/chat/completions", chat) if field in CHAT_FIELDS else ("/v1/completions", plain)
        out.append(Probe(name, path, {**body, field: valid}, f"HTTP 200 ({field} {valid!r})"))
        out.append(Probe(f"{name}-type", path, {**body, field: WRONG_TYPE},
                         f"HTTP 4xx: a server that reads {field} refuses an object"))
    return tuple(out)


def penalty_probes(model: str | None) -> tuple[Probe, ...]:
    """A repetitive prompt at T=0 with every penalty neutral, then with each penalty strong."""
    base: dict[str, Any] = {"stream": False, "prompt": REPEAT_PROMPT, "max_tokens": MAX_TOKENS, "seed": SEED,
                            **GREEDY_NEUTRAL}
    if model:
        base["model"] = model
    return (Probe("penalty-neutral", "/v1/completions", base, "HTTP 200: the raw top-1 continuation"),
            *(Probe(PENALTY_PROBES[name], "/v1/completions", {**base, **strong},
                    f"another continuation than penalty-neutral's ({name} acted on)")
              for name, strong in STRONG_PENALTIES.items()))


def _greedy(body: Mapping[str, Any], max_tokens: int) -> dict[str, Any]:
    return {**body, "max_tokens": max_tokens, "temperature": 0.0, "top_p": 1.0, "seed": SEED}


def structured_probes(model: str | None) -> tuple[Probe, ...]:
    """One request per structured-output field; its schema admits the one value ``"tally"``."""
    baseline, _, _ = _bases(model)
    body = _greedy(baseline, MAX_TOKENS)
    schema = dict(STRUCTURED_SCHEMA)
    chat = {k: v for k, v in body.items() if k != "prompt"}
    chat["messages"] = [{"role": "user", "content": COUNT_PROMPT}]
    want = f"the JSON string {STRUCTURED_VALUE!r}, the only value the schema admits"
    return (
        Probe("structured-outputs", "/v1/completions", {**body, "structured_outputs": {"json": schema}}, want),
        Probe("guided-json", "/v1/completions", {**body, "guided_json": schema}, want),
        Probe("response-format", "/v1/chat/completions",
              {**chat, "response_format": {"type": "json_object", "schema": schema}}, want),
    )


def stop_word(result: ProbeResult | None) -> tuple[str, str] | None:
    """(stop string, the text expected before it) from the T=0 reference: its middle word, or ``None``."""
    if result is None or result.status != 200 or not isinstance(result.parts.get("text"), str):
        return None
    text: str = result.parts["text"]
    words = text.split()
    if len(words) < 2:
        return None
    word = words[len(words) // 2]
    return word, text[: text.find(word)]


def forced_probes(eos: int, model: str | None, results: Mapping[str, ProbeResult]) -> tuple[Probe, ...]:
    """The probes that need a token forced, by whichever forcing the first requests showed works (maybe none)."""
    baseline, _, _ = _bases(model)
    probes = []
    eos_force = _force(eos, results)
    if eos_force is not None:
        probes.append(Probe("ignore-eos", "/v1/completions", {**baseline, **eos_force[1], "ignore_eos": True},
                            f"finish_reason length: EOS forced by {eos_force[0]} does not end it"))
    token = forced_token(eos)
    token_force = _force(token, results)
    if token_force is not None:
        probes.append(Probe("stop-token-ids", "/v1/completions",
                            {**baseline, **token_force[1], "stop_token_ids": [token]},
                            f"finish_reason stop at token {token} (forced by {token_force[0]})"))
    if eos_force is not None:
        probes.append(Probe("min-tokens", "/v1/completions",
                            {**_greedy(baseline, BASELINE_TOKENS), **eos_force[1], "min_tokens": MIN_TOKENS},
                            f"at least {MIN_TOKENS} tokens: min_tokens holds back EOS forced by {eos_force[0]}"))
    stop = stop_word(results.get("stop-reference"))
    if stop is not None:
        probes.append(Probe("stop-string", "/v1/completions",
                            {**_greedy(baseline, MAX_TOKENS), "stop": [stop[0]]},
                            f"the stop-reference text cut right before {stop[0]!r}, finish_reason stop"))
    return tuple(probes)


def _force(token: int, results: Mapping[str, ProbeResult]) -> tuple[str, dict[str, Any]] | None:
    """How to force ``token`` here: (``"allowed_token_ids"`` | ``"logit_bias"``, body members), or ``None``."""
    if _forcing(results, "allowed-eos", "allowed_token_ids")[0] == "honoured":
        return "allowed_token_ids", {"allowed_token_ids": [token]}
    if _logit_bias(results)[0] == "honoured":
        return "logit_bias", {"logit_bias": {str(token): 100}}
    return None


def _stopped_at_once(result: ProbeResult | None) -> bool:
    """A 200 that stopped on its first token (EOS forced)."""
    if result is None or result.status != 200 or result.parts.get("finish_reason") != "stop":
        return False
    tokens = token_count(result.parts)
    return (tokens is not None and tokens <= 1) or (tokens is None and not result.parts.get("text"))


def forced_token(eos: int) -> int:
    return FORCED_TOKEN if eos != FORCED_TOKEN else FORCED_TOKEN + 1


def judge_answered(probe: Probe, status: int, body: Any, parts: dict[str, Any]) -> tuple[bool, Outcome, str]:
    """A capability request only has to be answered; what the answer means is :func:`assess`'s."""
    if status >= 500:
        return False, "no_answer", f"HTTP {status}"
    if status >= 400:
        return True, "pass", f"HTTP {status}: {error_of(body)[1][:200]}"
    return True, "pass", f"HTTP {status}"


# --------------------------------------------------------------------------- the reading


@dataclass(frozen=True)
class FieldResult:
    """One field: what the server did with it, on what evidence, and whether the window can live with it."""

    field: str
    status: Status
    basis: Basis
    detail: str
    probes: tuple[str, ...]
    need: Need | None = None
    accepted_ignored: bool = False

    @property
    def failure(self) -> str | None:
        """Why this field fails the probe (``None``: it does not)."""
        need = self.need
        if need is None:
            return None
        if need.want == "honoured":
            if self.status == "honoured" or (self.status == "ignored" and self.accepted_ignored):
                return None
            return f"{self.field} {self.status.replace('_', ' ')} ({self.detail})"
        if need.want == "refused":
            if self.status == "refused":
                return None
            return f"{self.field} {self.status.replace('_', ' ')}, the vLLM control wants it refused ({self.detail})"
        if self.status in ("refused", "no_answer"):
            return f"{self.field} {self.status.replace('_', ' ')} ({self.detail}): tally's waves send it"
        return None

    @property
    def no_answer(self) -> bool:
        return self.status == "no_answer"

    def to_json(self) -> dict[str, Any]:
        return {
            "field": self.field, "status": self.status, "basis": self.basis, "detail": self.detail,
            "probes": list(self.probes), "needed": self.need is not None,
            "want": None if self.need is None else self.need.want,
            "reason": None if self.need is None else self.need.reason,
            "accepted_ignored": self.accepted_ignored, "ok": self.failure is None, "failure": self.failure,
        }


_Reading = tuple[Status, str]


def _missing(results: Mapping[str, ProbeResult], names: Sequence[str]) -> _Reading | None:
    """``no_answer`` when any of the deciding probes got none."""
    for name in names:
        result = results.get(name)
        if result is None:
            return "no_answer", f"{name}: not sent"
        if not result.answered:
            return "no_answer", f"{name}: {result.detail}"
    return None


def _refused(results: Mapping[str, ProbeResult], name: str) -> _Reading | None:
    """A 4xx on a valid value: ``refused`` when the baseline answered 200, else ``unclear``."""
    result = results[name]
    if result.status is None or not 400 <= result.status < 500:
        return None
    message = error_of(_error_body(result))[1][:200]
    baseline = results.get("baseline")
    if baseline is not None and baseline.status == 200:
        return "refused", f"{name}: HTTP {result.status}: {message}"
    return "unclear", f"{name}: HTTP {result.status} ({message}), and the baseline did not answer 200 either"


def _error_body(result: ProbeResult) -> Any:
    return {"error": result.error} if isinstance(result.error, dict) else result.error


def _tokens(result: ProbeResult) -> str:
    n = token_count(result.parts)
    return "an uncounted number of tokens" if n is None else f"{n} token{'s' if n != 1 else ''}"


def _finish(result: ProbeResult) -> str:
    return f"finish_reason {result.parts.get('finish_reason')!r} after {_tokens(result)}"


def _max_tokens(r: Mapping[str, ProbeResult]) -> _Reading:
    missing = _missing(r, ["baseline"])
    if missing:
        return missing
    base = r["baseline"]
    if base.status != 200:
        message = error_of(_error_body(base))[1][:200]
        if "max_tokens" in message:
            return "refused", f"baseline: HTTP {base.status}: {message}"
        return "unclear", f"baseline: HTTP {base.status}: {message}"
    n = token_count(base.parts)
    if n is None:
        return "unclear", "baseline: HTTP 200 with neither usage nor token_ids to count its tokens"
    if n > BASELINE_TOKENS:
        return "ignored", f"baseline: max_tokens {BASELINE_TOKENS}, {_finish(base)}"
    if n == BASELINE_TOKENS or base.parts.get("finish_reason") == "length":
        return "honoured", f"baseline: max_tokens {BASELINE_TOKENS}, {_finish(base)}"
    return "unclear", f"baseline: {_finish(base)}, before max_tokens {BASELINE_TOKENS}"


def _output(result: ProbeResult) -> tuple[Any, Any]:
    return result.parts.get("text"), result.parts.get("token_ids")


def _seed(r: Mapping[str, ProbeResult]) -> _Reading:
    missing = _missing(r, ["seed-a", "seed-b", "seed-c"])
    if missing:
        return missing
    for name in ("seed-a", "seed-b", "seed-c"):
        refused = _refused(r, name)
        if refused:
            return refused
    a, b, c = (_output(r[n]) for n in ("seed-a", "seed-b", "seed-c"))
    if a != b:
        return "ignored", f"seed {SEED} twice at temperature 1 gave two outputs ({a[0]!r}, {b[0]!r})"
    if a == c:
        return "unclear", f"seeds {SEED} and {OTHER_SEED} gave the same output ({a[0]!r}): it does not depend on " \
                          "the seed here"
    return "honoured", f"seed {SEED} twice gave one output ({a[0]!r}); seed {OTHER_SEED} another ({c[0]!r})"


def _forced(r: Mapping[str, ProbeResult], name: str, what: str) -> _Reading | None:
    if name in r:
        return None
    return "unclear", f"{name} not sent: no way to force {what} (allowed_token_ids " \
                      f"{_forcing(r, 'allowed-eos', 'allowed_token_ids')[0]}, logit_bias {_logit_bias(r)[0]})"


def _status_of(result: ProbeResult | None) -> str:
    if result is None:
        return "not sent"
    if result.status is None:
        return "no answer"
    return f"HTTP {result.status}" + (f", {_finish(result)}" if result.status == 200 else "")


def _ignore_eos(r: Mapping[str, ProbeResult]) -> _Reading:
    unforced = _forced(r, "ignore-eos", "EOS")
    if unforced:
        return unforced
    missing = _missing(r, ["ignore-eos"]) or _refused(r, "ignore-eos")
    if missing:
        return missing
    probe = r["ignore-eos"]
    reason = probe.parts.get("finish_reason")
    if reason == "length":
        return "honoured", f"ignore-eos: EOS forced, {_finish(probe)}"
    if reason == "stop":
        return "ignored", f"ignore-eos: EOS forced with ignore_eos true, {_finish(probe)}"
    return "unclear", f"ignore-eos: {_finish(probe)}"


def _stop_token_ids(r: Mapping[str, ProbeResult], eos: int) -> _Reading:
    token = forced_token(eos)
    unforced = _forced(r, "stop-token-ids", f"token {token}")
    if unforced:
        return unforced
    missing = _missing(r, ["stop-token-ids"]) or _refused(r, "stop-token-ids")
    if missing:
        return missing
    probe = r["stop-token-ids"]
    reason, stop = probe.parts.get("finish_reason"), probe.parts.get("stop_reason")
    n = token_count(probe.parts)
    if reason == "stop" and (stop == token or (stop is None and n is not None and n <= 1)):
        return "honoured", f"stop-token-ids: token {token} forced, {_finish(probe)}, stop_reason {stop!r}"
    if reason == "length":
        return "ignored", f"stop-token-ids: token {token} forced with stop_token_ids [{token}], {_finish(probe)}"
    return "unclear", f"stop-token-ids: {_finish(probe)}, stop_reason {stop!r}"


def _forcing(r: Mapping[str, ProbeResult], name: str, field: str) -> _Reading:
    """EOS forced on the baseline's prompt: honoured when it stops at once where the baseline ran on."""
    missing = _missing(r, ["baseline", name]) or _refused(r, name)
    if missing:
        return missing
    probe, base = r[name], r["baseline"]
    if base.status != 200 or base.parts.get("finish_reason") != "length":
        return "unclear", f"the baseline itself did not run to length ({_status_of(base)}): cannot tell"
    if _stopped_at_once(probe):
        return "honoured", f"{name}: {field} forcing EOS, {_finish(probe)} (the baseline ran to length)"
    return "ignored", f"{name}: {field} forcing EOS, yet {_finish(probe)} as the baseline"


def _logit_bias(r: Mapping[str, ProbeResult]) -> _Reading:
    """The control's refusal (vLLM under speculative decoding) or, when it was answered, ``bias-eos``."""
    missing = _missing(r, ["control"])
    if missing:
        return missing
    control = r["control"]
    if control.status is not None and 400 <= control.status < 500:
        return "refused", f"control: HTTP {control.status}: {error_of(_error_body(control))[1][:200]}"
    return _forcing(r, "bias-eos", "logit_bias")


def assess_logit_bias(results: Mapping[str, ProbeResult]) -> tuple[Status, str]:
    """``logit_bias``'s reading (status, detail) from the probes' results."""
    return _logit_bias(results)


def _type_checked(r: Mapping[str, ProbeResult], valid: str, wrong: str, field: str) -> _Reading:
    missing = _missing(r, [valid, wrong]) or _refused(r, valid)
    if missing:
        return missing
    probe = r[wrong]
    if probe.status is not None and 400 <= probe.status < 500:
        return "honoured", f"{wrong}: {field} as an object answered HTTP {probe.status} (the server reads it)"
    return "ignored", f"{wrong}: {field} as an object answered HTTP {probe.status}: the server does not read it"


def _engine_field(r: Mapping[str, ProbeResult], valid: str, field: str) -> _Reading:
    """An engine-side field's type check, probed only where the window registers the field."""
    if valid not in r and f"{valid}-type" not in r:
        return "unclear", f"{field}: not probed (the window does not register it)"
    return _type_checked(r, valid, f"{valid}-type", field)


def priority_read(results: Mapping[str, ProbeResult]) -> bool:
    """The type check shows the server reads ``priority`` (then :mod:`.priority` asks whether it schedules by it)."""
    return _type_checked(results, "plain", "priority-type", "priority")[0] == "honoured"


def _priority(r: Mapping[str, ProbeResult]) -> tuple[_Reading, Basis, tuple[str, ...]]:
    """Read (the type check), then scheduled by (the reported policy, else ``priority-order``)."""
    from .priority import PROBE_NAME, priority_reading

    typed = _type_checked(r, "plain", "priority-type", "priority")
    probes = ("plain", "priority-type", "baseline", PROBE_NAME)
    if typed[0] != "honoured":
        return typed, "type check", probes
    scheduled = priority_reading(r.get(PROBE_NAME))
    if scheduled is None:
        return ("unclear", f"{typed[1]}; whether it schedules by it was not probed ({PROBE_NAME} not sent)"), \
            "type check", probes
    status, detail, basis = scheduled
    if basis == "type check":
        detail = f"{typed[1]}; {detail}"
    return (status, detail), basis, probes  # type: ignore[return-value]


def _token_ids(r: Mapping[str, ProbeResult]) -> _Reading:
    missing = _missing(r, ["token-ids"]) or _refused(r, "token-ids")
    if missing:
        return missing
    parts = r["token-ids"].parts
    count = parts.get("token_ids_count")
    if parts.get("token_ids_malformed"):
        return "unclear", "token-ids: token_ids is not a list of integers"
    if isinstance(count, int) and count > 0:
        usage = parts.get("completion_tokens")
        also = "" if usage is None else f" (usage says {usage})"
        return "honoured", f"token-ids: {count} token_ids{also}"
    return "ignored", "token-ids: HTTP 200 without token_ids"


def _usage(r: Mapping[str, ProbeResult]) -> _Reading:
    missing = _missing(r, ["usage"]) or _refused(r, "usage")
    if missing:
        return missing
    probe = r["usage"]
    parts = probe.parts
    if parts.get("error_frame"):
        return "refused", f"usage: HTTP 200 with an error frame: {str(parts['error_frame'])[:200]}"
    if not parts.get("streamed"):
        return "unclear", "usage: the server answered without streaming"
    if parts.get("usage_chunk") and isinstance(parts.get("completion_tokens"), int):
        return "honoured", f"usage: a usage chunk after {parts.get('frames')} frames " \
                           f"(completion_tokens {parts['completion_tokens']})"
    if isinstance(parts.get("completion_tokens"), int):
        return "honoured", "usage: usage on a choice frame (no separate usage chunk)"
    if parts.get("malformed_frames"):
        return "unclear", f"usage: {parts['malformed_frames']} of {parts.get('frames')} frames were not JSON"
    return "ignored", f"usage: {parts.get('frames')} frames, none with usage"


def _min_tokens(r: Mapping[str, ProbeResult]) -> _Reading:
    unforced = _forced(r, "min-tokens", "EOS")
    if unforced:
        return unforced
    missing = _missing(r, ["min-tokens"]) or _refused(r, "min-tokens")
    if missing:
        return missing
    probe = r["min-tokens"]
    n = token_count(probe.parts)
    if n is None:
        return "unclear", "min-tokens: HTTP 200 with neither usage nor token_ids to count its tokens"
    if n >= MIN_TOKENS:
        return "honoured", f"min-tokens: EOS forced with min_tokens {MIN_TOKENS}, {_finish(probe)}"
    if _stopped_at_once(probe):
        return "ignored", f"min-tokens: EOS forced with min_tokens {MIN_TOKENS}, yet {_finish(probe)}"
    return "unclear", f"min-tokens: {_finish(probe)}"


def _stop(r: Mapping[str, ProbeResult]) -> _Reading:
    missing = _missing(r, ["stop-reference"])
    if missing:
        return missing
    stop = stop_word(r["stop-reference"])
    if stop is None:
        return "unclear", f"stop-reference: {_status_of(r['stop-reference'])}, no two words to place a stop in"
    missing = _missing(r, ["stop-string"]) or _refused(r, "stop-string")
    if missing:
        return missing
    probe, (word, expected) = r["stop-string"], stop
    text = probe.parts.get("text")
    if not isinstance(text, str):
        return "unclear", "stop-string: HTTP 200 without a text"
    if text == expected and probe.parts.get("finish_reason") == "stop":
        return "honoured", f"stop-string: stop {word!r} cut the text at character {len(expected)}, finish stop"
    if text.startswith(expected + word):
        return "ignored", f"stop-string: stop {word!r}, yet the text runs through it ({_finish(probe)})"
    return "unclear", f"stop-string: stop {word!r}, the text differs from the T=0 reference's ({_finish(probe)})"


def _penalty(r: Mapping[str, ProbeResult], field: str) -> _Reading:
    """A strong penalty changes the neutral T=0 continuation of a repetitive prompt: the server acts on it."""
    name = PENALTY_PROBES[field]
    missing = _missing(r, ["penalty-neutral", name]) or _refused(r, name)
    if missing:
        return missing
    neutral, strong = r["penalty-neutral"], r[name]
    if neutral.status != 200 or strong.status != 200:
        return "unclear", f"{name}: {_status_of(strong)}; penalty-neutral: {_status_of(neutral)}"
    if _output(neutral) == _output(strong):
        return "ignored", f"{name}: the strong {field} answered what the neutral one did " \
                          f"({str(neutral.parts.get('text'))[:60]!r}): the server does not read it"
    return "honoured", f"{name}: the strong {field} changed the T=0 continuation " \
                       f"({str(neutral.parts.get('text'))[:40]!r} -> {str(strong.parts.get('text'))[:40]!r})"


def _structured(r: Mapping[str, ProbeResult], name: str) -> _Reading:
    from ledger.errors import FormatError
    from ledger.strictjson import read_json

    missing = _missing(r, [name]) or _refused(r, name)
    if missing:
        return missing
    probe = r[name]
    text = probe.parts.get("text")
    if probe.status != 200 or not isinstance(text, str):
        return "unclear", f"{name}: {_status_of(probe)} without a text"
    try:
        value = read_json(text.strip().encode(), "the structured answer", max_bytes=1 << 16)
    except FormatError:
        value = None
        if text.strip().startswith('"'):
            return "unclear", f"{name}: a JSON string begun but not ended ({_finish(probe)}): cannot tell"
    if value == STRUCTURED_VALUE:
        return "honoured", f"{name}: answered {text.strip()!r}, the one value its schema admits"
    return "ignored", f"{name}: answered {text[:60]!r}, not the schema's one value {STRUCTURED_VALUE!r}"


def assess(eos: int, results: Mapping[str, ProbeResult], needs: Sequence[Need],
           accept_ignored: Sequence[str] = ()) -> tuple[FieldResult, ...]:
    """Every field's status from the probes' results, with what the window needs of it."""
    readings: dict[str, tuple[_Reading, Basis, tuple[str, ...]]] = {
        "seed": (_seed(results), "behaviour", ("seed-a", "seed-b", "seed-c")),
        "ignore_eos": (_ignore_eos(results), "behaviour", ("allowed-eos", "bias-eos", "ignore-eos")),
        "max_tokens": (_max_tokens(results), "behaviour", ("baseline",)),
        "priority": _priority(results),
        "cache_salt": (_type_checked(results, "cache-salt", "cache-salt-type", "cache_salt"), "type check",
                       ("cache-salt", "cache-salt-type", "baseline")),
        "allowed_token_ids": (_forcing(results, "allowed-eos", "allowed_token_ids"), "behaviour",
                              ("allowed-eos", "baseline")),
        "stop_token_ids": (_stop_token_ids(results, eos), "behaviour",
                           ("allowed-eos", "bias-eos", "stop-token-ids")),
        "return_token_ids": (_token_ids(results), "behaviour", ("token-ids", "baseline")),
        "stream_options.include_usage": (_usage(results), "behaviour", ("usage", "baseline")),
        "logit_bias": (_logit_bias(results), "behaviour", ("control", "bias-eos", "baseline")),
        "min_tokens": (_min_tokens(results), "behaviour", ("allowed-eos", "bias-eos", "min-tokens")),
        "stop": (_stop(results), "behaviour", ("stop-reference", "stop-string")),
        **{field: (_structured(results, name), "behaviour", (name,)) for field, name in STRUCTURED_PROBES.items()},
        **{field: (_penalty(results, field), "behaviour", ("penalty-neutral", name))
           for field, name in PENALTY_PROBES.items()},
        **{field: (_engine_field(results, name, field), "type check", (name, f"{name}-type"))
           for field, (name, _) in TYPED_FIELDS.items()},
    }
    by_field = {need.field: need for need in needs}
    out = []
    for name in FIELDS:
        (status, detail), basis, probes = readings[name]
        out.append(FieldResult(name, status, basis, detail, tuple(p for p in probes if p in results),
                               by_field.get(name), name in accept_ignored and status == "ignored"))
    return tuple(out)
