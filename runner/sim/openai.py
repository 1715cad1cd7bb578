"""The OpenAI-compatible surface as vLLM speaks it: request fields, chunk shapes, error bodies.

Pure: parsing a request body, checking it as vLLM's frontend and engine would, and
building the JSON objects the server sends (``reference/vllm.md`` sections 2-3).

Two kinds of refusal, as in vLLM:

* *frontend* (:func:`parse_request`): malformed JSON or fields, ``stream_options``
  without ``stream``, an unknown model, a context that does not fit: always an HTTP
  error status with ``{"error": {"message", "type", "param", "code"}}``;
* *engine* (:func:`engine_check`, ``SamplingParams.verify``): ``logit_bias`` or
  ``min_p`` under speculative decoding, bad ``allowed_token_ids``/``logit_bias`` ids:
  a 400 when not streaming, but an error frame inside an HTTP 200 stream when
  streaming (vLLM validates lazily inside the SSE generator).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .config import ArmConfig, SimConfig
from .model import SamplingParams, chat_prompt_tokens, prompt_token_ids

__all__ = [
    "ApiError",
    "ApiRequest",
    "chat_chunk",
    "chat_delta",
    "completion_chunk",
    "engine_check",
    "error_body",
    "full_usage",
    "invalid",
    "parse_request",
    "usage_chunk",
    "usage_of",
]

_SAMPLING_EPS = 1e-5
# vLLM's chat ``reasoning_effort`` (read by the simulator on both endpoints: docs/sim.md)
REASONING_EFFORTS = ("low", "medium", "high")
# The engine-side sampling fields a plan may register, kept on the truth record as each request set them
ENGINE_FIELDS = ("reasoning_effort", "top_k", "min_p", "repetition_penalty")
IGNORED_MAX_TOKENS = 16   # what a server ignoring max_tokens generates (llama-cpp-python's completion default)
_MAX_TOKENS_NAMES = ("max_tokens", "max_completion_tokens")
_REPETITION_NAMES = ("repetition_penalty", "repeat_penalty")
SPEC_REJECTION = "The min_p and logit_bias sampling parameters are not yet supported with speculative decoding."
Kind = Literal["completion", "chat"]


@dataclass(frozen=True)
class ApiError(Exception):
    """An error answer: HTTP ``status`` and vLLM's error body."""

    status: int
    message: str
    type: str = "BadRequestError"
    param: str | None = None

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.status)


def error_body(message: str, type_: str, param: str | None, code: int) -> dict[str, Any]:
    """``ErrorResponse`` of vLLM >= 0.10.1: ``code`` is the integer HTTP status."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


@dataclass(frozen=True)
class ApiRequest:
    """A parsed completion or chat request (only what the simulator acts on)."""

    kind: Kind
    model: str
    prompt_ids: tuple[int, ...]
    stream: bool
    include_usage: bool
    continuous_usage: bool
    params: SamplingParams
    seed: int | None
    priority: int
    cache_salt: str | None
    return_token_ids: bool
    logit_bias: Mapping[str, float] | None
    min_p: float
    request_id: str | None
    stop: tuple[str, ...] = ()            # stop strings
    logprobs: int = 0                     # top logprobs per position (completions' ``logprobs``)
    schema: Mapping[str, Any] | None = None  # a JSON schema the output must follow (structured outputs)
    engine_fields: Mapping[str, Any] | None = None  # the engine-side sampling fields it set, as read (truth)


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, "BadRequestError", param)


def invalid(loc: str, kind: str, message: str) -> ApiError:
    """A request-model validation error as vLLM 0.32 answers it (FastAPI/pydantic): type ``Bad Request``,
    ``param`` the location (``body``, ``body.max_tokens``; ``body.N`` for a JSON decode error at N)."""
    return ApiError(400, f"1 validation error:\n  {{'type': '{kind}', 'loc': '{loc}', 'msg': '{message}'}}",
                    "Bad Request", loc)


def _int(body: Mapping[str, Any], name: str, default: int | None, low: int | None = None) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"body.{name}", "int_type", "Input should be a valid integer")
    if low is not None and value < low:
        raise _bad(f"{name} must be at least {low}, got {value}.", name)
    return value


def _float(body: Mapping[str, Any], name: str, default: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise invalid(f"body.{name}", "float_type", "Input should be a valid number")
    return float(value)


def _bool(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"body.{name}", "bool_type", "Input should be a valid boolean")
    return value


def _int_list(body: Mapping[str, Any], name: str) -> tuple[int, ...] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise invalid(f"body.{name}", "list_type", "Input should be a valid list of integers")
    return tuple(value)


def parse_request(kind: Kind, body: Any, config: SimConfig) -> ApiRequest:
    """Frontend validation of a request body; raises :class:`ApiError`."""
    if not isinstance(body, dict):
        raise invalid("body", "model_attributes_type", "Input should be a valid dictionary or object to extract "
                      "fields from")
    for name in config.refuse_fields:
        if _carries(body, name):
            raise _bad(f"Parameter '{name}' is not supported by this server.", name)
    body = _without_ignored(body, config.ignore_fields)
    model = body.get("model")
    if model is None:
        model = config.model
    if not isinstance(model, str):
        raise _bad("model must be a string", "model")
    if model != config.model:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise _bad("Stream options can only be defined when `stream=True`.", "stream_options")
        if not isinstance(options, dict):
            raise _bad("stream_options must be an object", "stream_options")
    include_usage = bool(options and options.get("include_usage", True)) \
        and "stream_options.include_usage" not in config.ignore_fields
    continuous = bool(options and options.get("continuous_usage_stats", False))
    if kind == "completion":
        prompt_ids = _completion_prompt(body.get("prompt"), config.vocab_size)
    else:
        prompt_ids = _chat_prompt(body.get("messages"), config.vocab_size)
    n = _int(body, "n", 1, 1)
    if n != 1:
        raise _bad("The simulator serves n = 1 only.", "n")
    max_name = "max_completion_tokens" if kind == "chat" and body.get("max_completion_tokens") is not None \
        else "max_tokens"
    max_tokens = _int(body, max_name, None, 1)
    room = config.max_model_len - len(prompt_ids)
    if max_tokens is None:
        max_tokens = IGNORED_MAX_TOKENS if "max_tokens" in config.ignore_fields else max(room, 1)
    if len(prompt_ids) + max_tokens > config.max_model_len:
        raise _bad(
            f"This model's maximum context length is {config.max_model_len} tokens. However, you requested "
            f"{len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.",
            "max_tokens",
        )
    for name in ("temperature", "top_p"):
        _float(body, name, 0.0)
    _int(body, "top_k", None, -1)
    # vLLM reads reasoning_effort on chat completions only; a completion's is an extra field it drops
    effort = body.get("reasoning_effort") if kind == "chat" else None
    if effort is not None and effort not in REASONING_EFFORTS:
        raise invalid("body.reasoning_effort", "literal_error",
                      "Input should be " + ", ".join(repr(e) for e in REASONING_EFFORTS[:-1]) + f" or "
                      f"{REASONING_EFFORTS[-1]!r}")
    # vLLM's repetition_penalty, or llama-cpp-python's name for it; else the server's own default
    repetition = "repetition_penalty" if body.get("repetition_penalty") is not None else "repeat_penalty"
    penalties = (_float(body, repetition, config.repetition_penalty),
                 _float(body, "presence_penalty", 0.0), _float(body, "frequency_penalty", 0.0))
    min_p = _float(body, "min_p", 0.0)
    min_tokens = _int(body, "min_tokens", 0, 0) or 0
    seed = _int(body, "seed", None)
    priority = _int(body, "priority", 0) or 0
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not 1 <= len(salt) <= 1024):
        raise _bad("Parameter 'cache_salt' must be a non-empty string of at most 1024 characters.", "cache_salt")
    bias = body.get("logit_bias")
    if bias is not None and (not isinstance(bias, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in bias.values())):
        raise _bad("logit_bias must map token ids to numbers", "logit_bias")
    request_id = body.get("request_id")
    if request_id is not None and not isinstance(request_id, str):
        raise _bad("request_id must be a string", "request_id")
    params = SamplingParams(
        greedy=body.get("temperature") == 0,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_bool(body, "ignore_eos", False),
        allowed_token_ids=_int_list(body, "allowed_token_ids"),
        stop_token_ids=_int_list(body, "stop_token_ids") or (),
        logit_bias=_bias_pairs(bias),
        penalties=penalties,
    )
    return ApiRequest(
        kind=kind, model=model, prompt_ids=tuple(prompt_ids), stream=stream, include_usage=include_usage,
        continuous_usage=continuous, params=params, seed=seed, priority=priority, cache_salt=salt,
        return_token_ids=_bool(body, "return_token_ids", False), logit_bias=bias or None, min_p=min_p,
        request_id=request_id, stop=_stops(body), logprobs=_logprobs(kind, body), schema=_schema(body),
        engine_fields={name: body[name] for name in ENGINE_FIELDS if body.get(name) is not None
                       and (name != "reasoning_effort" or kind == "chat")} or None,
    )


def _stops(body: Mapping[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        raise _bad("stop must be a string or a list of non-empty strings", "stop")
    return tuple(values)


def _logprobs(kind: Kind, body: Mapping[str, Any]) -> int:
    if kind == "chat":
        return (_int(body, "top_logprobs", 0, 0) or 0) if _bool(body, "logprobs", False) else 0
    return _int(body, "logprobs", 0, 0) or 0


def _schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema of a structured-output request: vLLM's ``structured_outputs.json`` or
    (before v0.12) ``guided_json``, or ``response_format`` ``json_schema`` (``json_object`` with a
    ``schema``: llama-cpp-python's)."""
    outputs = body.get("structured_outputs")
    schema: Any = outputs.get("json") if isinstance(outputs, dict) else None
    if schema is None:
        schema = body.get("guided_json")
    fmt = body.get("response_format")
    if schema is None and isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        inner = fmt.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, dict) else None
    if schema is None and isinstance(fmt, dict) and fmt.get("type") == "json_object":
        schema = fmt.get("schema")  # llama-cpp-python's form: json_object with a schema
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise _bad("the JSON schema must be an object", "structured_outputs")
    return schema


def _carries(body: Mapping[str, Any], name: str) -> bool:
    """Whether a request body sets field ``name`` (``stream_options.include_usage``: that member)."""
    if name == "stream_options.include_usage":
        options = body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is not None
    names = _MAX_TOKENS_NAMES if name == "max_tokens" else (name,)
    return any(body.get(n) is not None for n in names)


def _without_ignored(body: dict[str, Any], ignored: Sequence[str]) -> dict[str, Any]:
    """The body as a server that does not know the ``ignored`` fields sees it (they are dropped)."""
    aliases = {"max_tokens": _MAX_TOKENS_NAMES, "repetition_penalty": _REPETITION_NAMES}
    drop = {n for name in ignored for n in aliases.get(name, (name,))}
    return {k: v for k, v in body.items() if k not in drop}


def _bias_pairs(bias: Mapping[str, Any] | None) -> tuple[tuple[int, float], ...]:
    """In-vocabulary-looking ``logit_bias`` entries as (token, bias) pairs (the engine checks the ids)."""
    pairs = []
    for key, value in (bias or {}).items():
        try:
            pairs.append((int(key), float(value)))
        except ValueError:
            continue
    return tuple(sorted(pairs))


def _completion_prompt(prompt: Any, vocab_size: int) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return prompt_token_ids(prompt, vocab_size)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if any(not 0 <= t < vocab_size for t in prompt):
            raise _bad("Token id out of vocabulary in prompt.", "prompt")
        return list(prompt)
    raise _bad("prompt must be a non-empty string or list of token ids (one prompt).", "prompt")


def _chat_prompt(messages: Any, vocab_size: int) -> list[int]:
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list", "messages")
    pairs: list[tuple[str, str]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _bad(f"messages[{i}] must be an object with a role", "messages")
        content = message.get("content", "")
        if isinstance(content, list):
            content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content must be a string", "messages")
        pairs.append((message["role"], content))
    return chat_prompt_tokens(pairs, vocab_size)


def engine_check(request: ApiRequest, arm: ArmConfig, vocab_size: int) -> ApiError | None:
    """``SamplingParams.verify`` in the engine; ``None`` when the request may run."""
    allowed = request.params.allowed_token_ids
    if allowed is not None:
        if not allowed:
            return _bad("allowed_token_ids is not None and empty!", "allowed_token_ids")
        if any(not 0 <= t < vocab_size for t in allowed):
            return _bad("allowed_token_ids contains out-of-vocab token id!", "allowed_token_ids")
    if request.logit_bias:
        bad = []
        for key in request.logit_bias:
            try:
                token = int(key)
            except ValueError:
                token = -1
            if not 0 <= token < vocab_size:
                bad.append(key)
        if bad:
            return _bad(f"token_id(s) {bad} in logit_bias contain out-of-vocab token ids. "
                        f"Vocabulary size: {vocab_size}", "logit_bias")
    if arm.speculative and (request.min_p > _SAMPLING_EPS or request.logit_bias):
        return _bad(SPEC_REJECTION)
    return None


# ---------------------------------------------------------------------- response objects

FINGERPRINT = "vllm-0.32.0-tallysim"   # vLLM's system_fingerprint: its version and a build hash
NULL_TOP = {"kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}   # a whole reply's last members


def usage_of(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0) -> dict[str, Any]:
    """vLLM's field order: prompt, total, completion; with reasoning tokens among the completion's,
    OpenAI's ``completion_tokens_details.reasoning_tokens`` after them."""
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                             "completion_tokens": completion_tokens}
    if reasoning_tokens:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return usage


def full_usage(prompt_tokens: int, completion_tokens: int, reasoning_tokens: int = 0) -> dict[str, Any]:
    """A whole reply's usage: the streamed one's members and vLLM's two (null) details."""
    return {**usage_of(prompt_tokens, completion_tokens), "prompt_tokens_details": None,
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens} if reasoning_tokens else None}


def chat_delta(content: str, reasoning: str = "") -> dict[str, Any]:
    """A chat chunk's delta as vLLM writes it (unset members left out): the answer text as ``content``,
    reasoning text (behind a reasoning parser) as ``reasoning``, both when one step carried both."""
    if not reasoning:
        return {"content": content}
    return {"reasoning": reasoning, "content": content} if content else {"reasoning": reasoning}


def completion_chunk(rid: str, created: int, model: str, text: str, *, finish_reason: str | None,
                     stop_reason: int | str | None, token_ids: Sequence[int] | None,
                     prompt_token_ids: Sequence[int] | None, usage: dict[str, int] | None = None) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{
            "index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": stop_reason,
            "prompt_token_ids": list(prompt_token_ids) if prompt_token_ids is not None else None,
            "token_ids": list(token_ids) if token_ids is not None else None,
        }],
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def chat_chunk(rid: str, created: int, model: str, delta: dict[str, Any], *, finish_reason: str | None,
               stop_reason: int | str | None = None, token_ids: Sequence[int] | None = None,
               usage: dict[str, int] | None = None, prompt: Sequence[int] | bool | None = False) -> dict[str, Any]:
    """A chat chunk; ``prompt`` (the first chunk only: the prompt's token ids, or ``None``) adds vLLM's
    top-level ``prompt_token_ids`` and ``prompt_text``."""
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    if token_ids is not None:
        choice["token_ids"] = list(token_ids)
    chunk: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                             "choices": [choice]}
    if usage is not None:
        chunk["usage"] = usage
    if prompt is not False:
        chunk["prompt_token_ids"] = None if prompt is None or prompt is True else list(prompt)
        chunk["prompt_text"] = None
    return chunk


def usage_chunk(rid: str, created: int, model: str, kind: Kind, usage: dict[str, int]) -> dict[str, Any]:
    obj = "text_completion" if kind == "completion" else "chat.completion.chunk"
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": usage,
            "system_fingerprint": FINGERPRINT}
