"""Request-field semantics: every field honoured by default, ignored (`ignore_fields`) or refused (`refuse_fields`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import runner.sim as sim
from runner.sim.config import IGNORABLE_FIELDS
from runner.sim.openai import IGNORED_MAX_TOKENS, ApiError, parse_request

from .conftest import fast_config
from .test_api import stream


@pytest.fixture
def off() -> Iterator[sim.SimHandle]:
    """A simulator serving an arm without speculative decoding (logit_bias is then honoured)."""
    with sim.start(fast_config(production_arm="off"), seed=3) as handle:
        yield handle


def _post(http: httpx.Client, handle: sim.SimHandle, body: dict[str, Any]) -> dict[str, Any]:
    response = http.post(f"{handle.url}/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_non_streamed_answers_carry_token_ids_when_asked(server: sim.SimHandle, http: httpx.Client) -> None:
    body = _post(http, server, {"prompt": "a b c", "max_tokens": 6, "ignore_eos": True, "return_token_ids": True})
    choice = body["choices"][0]
    assert len(choice["token_ids"]) == body["usage"]["completion_tokens"] == 6
    assert len(choice["prompt_token_ids"]) == body["usage"]["prompt_tokens"] == 3
    chat = http.post(f"{server.url}/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "ignore_eos": True,
        "return_token_ids": True}).json()
    assert len(chat["choices"][0]["token_ids"]) == 3
    plain = _post(http, server, {"prompt": "a b c", "max_tokens": 6})
    assert plain["choices"][0]["token_ids"] is None  # only when asked (vLLM 0.32: the member is there, null)


def test_logit_bias_forces_and_bans_tokens_without_spec_decode(off: sim.SimHandle, http: httpx.Client) -> None:
    forced = _post(http, off, {"prompt": "p", "max_tokens": 5, "logit_bias": {"1000": 100}, "return_token_ids": True})
    assert forced["choices"][0]["token_ids"] == [1000] * 5
    eos = _post(http, off, {"prompt": "p", "max_tokens": 5, "logit_bias": {"1": 100}})
    assert eos["choices"][0]["finish_reason"] == "stop" and eos["usage"]["completion_tokens"] == 1
    banned = _post(http, off, {"prompt": "p", "max_tokens": 8, "allowed_token_ids": [7, 8],
                               "logit_bias": {"7": -100}, "return_token_ids": True})
    assert banned["choices"][0]["token_ids"] == [8] * 8
    plain = _post(http, off, {"prompt": "p", "max_tokens": 8, "return_token_ids": True})
    assert len(set(plain["choices"][0]["token_ids"])) > 1


def test_stop_token_ids_stop_with_the_token_as_stop_reason(server: sim.SimHandle, http: httpx.Client) -> None:
    body = _post(http, server, {"prompt": "p", "max_tokens": 6, "allowed_token_ids": [1000],
                                "stop_token_ids": [1000]})
    assert body["choices"][0]["finish_reason"] == "stop" and body["choices"][0]["stop_reason"] == 1000
    assert body["usage"]["completion_tokens"] == 1


def test_priority_and_cache_salt_of_the_wrong_type_are_refused(server: sim.SimHandle, http: httpx.Client) -> None:
    for field, value in (("priority", "high"), ("priority", {"x": 1}), ("cache_salt", {"x": 1}), ("cache_salt", "")):
        response = http.post(f"{server.url}/v1/completions", json={"prompt": "p", "max_tokens": 2, field: value})
        # priority is an integer of vLLM's request model (FastAPI's validation: body.priority); cache_salt
        # is checked by vLLM itself (the bare field name), as vLLM 0.32 answers
        param = f"body.{field}" if field == "priority" else field
        assert response.status_code == 400 and response.json()["error"]["param"] == param


def _parse(body: dict[str, Any], **config: Any) -> Any:
    if "reasoning_effort" in body:   # read on chat completions only, as vLLM reads it
        return parse_request("chat", {"messages": [{"role": "user", "content": "a b"}], **body}, fast_config(**config))
    return parse_request("completion", {"prompt": "a b", **body}, fast_config(**config))


def test_reasoning_effort_is_read_on_chat_completions_only() -> None:
    """vLLM's completion request has no reasoning_effort: an extra field it drops (never validated)."""
    assert parse_request("completion", {"prompt": "a", "reasoning_effort": {"x": 1}}, fast_config()).engine_fields \
        is None
    with pytest.raises(ApiError):
        parse_request("chat", {"messages": [{"role": "user", "content": "a"}], "reasoning_effort": {"x": 1}},
                      fast_config())


# What each ignorable field does when honoured, as the parsed request shows it.
_SET: dict[str, tuple[dict[str, Any], Any]] = {
    "ignore_eos": ({"ignore_eos": True}, lambda r: r.params.ignore_eos),
    "seed": ({"seed": 5}, lambda r: r.seed),
    "priority": ({"priority": 3}, lambda r: r.priority),
    "min_tokens": ({"min_tokens": 2}, lambda r: r.params.min_tokens),
    "allowed_token_ids": ({"allowed_token_ids": [5]}, lambda r: r.params.allowed_token_ids),
    "return_token_ids": ({"return_token_ids": True}, lambda r: r.return_token_ids),
    "max_tokens": ({"max_tokens": 3}, lambda r: r.params.max_tokens),
    "cache_salt": ({"cache_salt": "s"}, lambda r: r.cache_salt),
    "stop_token_ids": ({"stop_token_ids": [5]}, lambda r: r.params.stop_token_ids),
    "stream_options": ({"stream": True, "stream_options": {"include_usage": True}}, lambda r: r.include_usage),
    "stream_options.include_usage": ({"stream": True, "stream_options": {"include_usage": True}},
                                     lambda r: r.include_usage),
    "logit_bias": ({"logit_bias": {"5": 1.5}}, lambda r: (r.logit_bias, r.params.logit_bias)),
    "stop": ({"stop": ["x"]}, lambda r: r.stop),
    "structured_outputs": ({"structured_outputs": {"json": {"type": "string"}}}, lambda r: r.schema),
    "guided_json": ({"guided_json": {"type": "string"}}, lambda r: r.schema),
    "response_format": ({"response_format": {"type": "json_object", "schema": {"type": "string"}}},
                        lambda r: r.schema),
    "repetition_penalty": ({"repetition_penalty": 1.3}, lambda r: r.params.penalties[0]),
    "presence_penalty": ({"presence_penalty": 0.5}, lambda r: r.params.penalties[1]),
    "frequency_penalty": ({"frequency_penalty": 0.5}, lambda r: r.params.penalties[2]),
    "reasoning_effort": ({"reasoning_effort": "low"}, lambda r: (r.engine_fields or {}).get("reasoning_effort")),
    "top_k": ({"top_k": 5}, lambda r: (r.engine_fields or {}).get("top_k")),
    "min_p": ({"min_p": 0.1}, lambda r: r.min_p),
}


def test_every_ignorable_field_has_a_case() -> None:
    assert set(_SET) == set(IGNORABLE_FIELDS)


@pytest.mark.parametrize("field", IGNORABLE_FIELDS)
def test_an_ignored_field_is_dropped_silently(field: str) -> None:
    body, seen = _SET[field]
    honoured = _parse(body)
    ignored = _parse(body, ignore_fields=[field])
    absent = _parse({k: v for k, v in body.items() if k == "stream"})
    assert seen(honoured) != seen(absent)
    if field == "max_tokens":
        assert seen(ignored) == IGNORED_MAX_TOKENS  # a default, as llama-cpp-python's 16
    else:
        assert seen(ignored) == seen(absent)
    others = [f for f in IGNORABLE_FIELDS if f != field and not f.startswith("stream_options")]
    assert all(_SET[f][1](_parse(_SET[f][0], ignore_fields=[field])) == _SET[f][1](_parse(_SET[f][0]))
               for f in others)


@pytest.mark.parametrize("field", IGNORABLE_FIELDS)
def test_a_refused_field_is_a_400_naming_it(field: str) -> None:
    body, _ = _SET[field]
    with pytest.raises(ApiError) as refused:
        _parse(body, refuse_fields=[field])
    assert refused.value.status == 400 and refused.value.param == field and field in refused.value.message
    _parse({k: v for k, v in body.items() if k == "stream"}, refuse_fields=[field])  # absent: fine


def test_ignored_include_usage_sends_no_usage_chunk(http: httpx.Client) -> None:
    with sim.start(fast_config(ignore_fields=["stream_options.include_usage"])) as handle:
        status, data = stream(http, f"{handle.url}/v1/completions", {
            "prompt": "p", "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200 and data[-1] == "[DONE]" and all("usage" not in d for d in data[:-1])
