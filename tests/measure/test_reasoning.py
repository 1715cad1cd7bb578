"""Reasoning and answer tokens counted apart, where the server streams reasoning apart (vLLM's reasoning parser)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

import runner.sim as sim
from runner.events import payloads as pl
from runner.events.schema import to_wire
from runner.measure import RequestRecord, measure_wave, read_frame
from runner.measure.record import summary_entry_bound

from .conftest import MODEL, fast_config, prompts
from .hostile import Handler, serve

REASONING = 5
MAX_TOKENS = 12
NEW_MEMBERS = {"reasoning_tokens", "answer_tokens", "first_answer_s"}


def _delta(**delta: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "tiny",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]}


# ------------------------------------------------------------------------------------------ the frame reader

@pytest.mark.parametrize("member", ["reasoning", "reasoning_content"])
def test_either_spelling_reads_as_reasoning(member: str) -> None:
    frame = read_frame(_delta(**{member: " think"}))
    assert frame.reasoning == " think" and frame.text is None


def test_newer_spelling_first_and_content_apart() -> None:
    frame = read_frame(_delta(reasoning=" a", reasoning_content=" a", content=" b"))
    assert (frame.reasoning, frame.text) == (" a", " b")
    whole = read_frame({"choices": [{"message": {"content": "x", "reasoning": "r"}}]})
    assert (whole.reasoning, whole.text) == ("r", "x")


@pytest.mark.parametrize("value", [5, ["x"], {"text": "x"}, True, "", None])
def test_a_reasoning_member_not_a_string_is_ignored(value: Any) -> None:
    frame = read_frame(_delta(reasoning=value, reasoning_content=value))
    assert frame.reasoning is None
    assert read_frame(_delta(reasoning=value, content=" b")).reasoning is None


# ------------------------------------------------------------------------------------------ a scripted server

class ReasoningServer(Handler):
    """A chat stream: two reasoning chunks (both spellings), a malformed reasoning frame, one chunk of both,
    two answer chunks; no token ids and no usage details (the split is counted from the chunks)."""

    def post(self, body: dict[str, Any]) -> None:
        self.sse_headers()
        frames = [_delta(role="assistant", content=""), _delta(reasoning=" a"), _delta(reasoning_content=" b"),
                  _delta(reasoning=7), _delta(reasoning={"x": 1}, content=None), _delta(reasoning=" c", content=" d"),
                  _delta(content=" e"), _delta(content=" f")]
        for frame in frames:
            self.wfile.write(b"data: " + json.dumps(frame).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(0.005)   # one read per frame: each chunk its own arrival
        self.wfile.write(b"data: " + json.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk",
                                                 "model": "tiny", "choices": [], "usage": {
                                                     "prompt_tokens": 3, "total_tokens": 9,
                                                     "completion_tokens": 6}}).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")


def test_reasoning_chunks_counted_apart_on_a_scripted_stream() -> None:
    with serve(ReasoningServer) as server:
        wave = measure_wave(server.url, None, prompts(1), model="tiny", max_tokens=6, seed=1, chat=True,
                            return_token_ids=False)
    record = wave.requests[0]
    assert record.status == "ok" and record.reason is None
    # the malformed reasoning frames carried nothing: not a chunk, not a failure
    assert record.chunk_kinds == "rrmaa" and len(record.chunk_t) == 5
    assert record.delivered_tokens == 6 and record.tokens_source == "usage"
    assert record.usage_reasoning_tokens is None
    assert (record.reasoning_tokens, record.answer_tokens) == (2, 4)   # the chunk of both counts as answer
    assert record.ttft_s == record.chunk_t[0] < record.first_answer_s == record.chunk_t[2]


def test_an_answer_that_never_came() -> None:
    record = RequestRecord(index=0, prompt_id="p", status="ok", reason=None, sent_at="t", send_t=0.0, ended_s=1.0,
                           seed=None, max_tokens=3, cache_salt="", chunk_t=(0.1, 0.2, 0.3), delivered_tokens=3,
                           tokens_source="chunks", chunk_token_counts=(1, 1, 1), chunk_kinds="rrr")
    assert (record.reasoning_tokens, record.answer_tokens, record.first_answer_s) == (3, 0, None)
    assert record.summary_entry()["first_answer_s"] is None


# ------------------------------------------------------------------------------------------ the simulator

@pytest.mark.parametrize("stream_mode", ["step", "token"])
def test_reasoning_tokens_counted_apart_on_a_simulated_reasoning_server(stream_mode: str) -> None:
    config = fast_config(stream_mode=stream_mode).with_arm("production", reasoning_tokens=REASONING)
    with sim.spawn(config, seed=3) as host:
        wave = measure_wave(host.url, host.metrics_url, prompts(3), model=MODEL, max_tokens=MAX_TOKENS, seed=3,
                            chat=True)
        truth = {r["request_id"]: r for r in host.truth()["requests"]}
    assert [r.status for r in wave.requests] == ["ok"] * 3
    for record in wave.requests:
        assert truth[record.request_id]["reasoning_tokens"] == REASONING
        assert record.delivered_tokens == MAX_TOKENS
        assert record.usage_reasoning_tokens == REASONING
        assert (record.reasoning_tokens, record.answer_tokens) == (REASONING, MAX_TOKENS - REASONING)
        assert record.ttft_s is not None and record.first_answer_s is not None
        # the first answer chunk comes after the reasoning ones: its time is that chunk's (chunks one network
        # read carried share a stamp, so under load it may equal the first chunk's)
        first_answer = next(i for i, kind in enumerate(record.chunk_kinds or "") if kind != "r")
        assert first_answer > 0 and record.first_answer_s == record.chunk_t[first_answer] >= record.ttft_s
        assert record.chunk_kinds is not None and record.chunk_kinds.startswith("r")
        entry = record.summary_entry()
        assert {k: entry[k] for k in NEW_MEMBERS} == {"reasoning_tokens": REASONING,
                                                      "answer_tokens": MAX_TOKENS - REASONING,
                                                      "first_answer_s": record.first_answer_s}
        assert len(json.dumps(entry, separators=(",", ":"))) + 1 <= summary_entry_bound(record.prompt_id,
                                                                                          record.index)
        wire = to_wire(pl.RequestSummary(**entry))
        assert wire["reasoning_tokens"] == REASONING and wire["answer_tokens"] == MAX_TOKENS - REASONING
    client = wave.summary()["client"]
    assert (client["reasoning_tokens"], client["answer_tokens"]) == (3 * REASONING, 3 * (MAX_TOKENS - REASONING))
    assert client["delivered_tokens"] == 3 * MAX_TOKENS
    # the step mode carried a step crossing the boundary in one chunk; the token mode one token per chunk
    if stream_mode == "token":
        assert all(r.chunk_kinds == "r" * REASONING + "a" * (MAX_TOKENS - REASONING) for r in wave.requests)


def test_no_reasoning_arm_writes_no_new_member() -> None:
    with sim.spawn(fast_config(), seed=3) as host:
        wave = measure_wave(host.url, host.metrics_url, prompts(2), model=MODEL, max_tokens=MAX_TOKENS, seed=3,
                            chat=True)
        truth = host.truth()["requests"]
    assert all(t["reasoning_tokens"] == 0 for t in truth)
    for record in wave.requests:
        assert record.status == "ok" and record.delivered_tokens == MAX_TOKENS
        assert record.chunk_kinds is None and record.usage_reasoning_tokens is None
        assert record.reasoning_tokens is None and record.answer_tokens is None
        assert record.first_answer_s == record.ttft_s
        entry = record.summary_entry()
        assert not NEW_MEMBERS & entry.keys()
        assert not NEW_MEMBERS & to_wire(pl.RequestSummary(**entry)).keys()
        line = record.to_json()
        assert not ({"chunk_kinds", "usage_reasoning_tokens"} | NEW_MEMBERS) & line.keys()
    assert not {"reasoning_tokens", "answer_tokens"} & wave.summary()["client"].keys()


def test_a_completion_on_a_reasoning_arm_has_no_reasoning() -> None:
    config = fast_config().with_arm("production", reasoning_tokens=REASONING)
    with sim.spawn(config, seed=3) as host:
        wave = measure_wave(host.url, host.metrics_url, prompts(1), model=MODEL, max_tokens=MAX_TOKENS, seed=3)
    assert wave.requests[0].chunk_kinds is None and wave.requests[0].delivered_tokens == MAX_TOKENS


# ------------------------------------------------------------------------------------------ records.jsonl

def test_records_round_trip_and_old_lines_load() -> None:
    config = fast_config().with_arm("production", reasoning_tokens=REASONING)
    with sim.spawn(config, seed=3) as host:
        wave = measure_wave(host.url, host.metrics_url, prompts(1), model=MODEL, max_tokens=MAX_TOKENS, seed=3,
                            chat=True)
    record = wave.requests[0]
    line = json.loads(record.json_line())
    assert RequestRecord.from_json(line) == record
    # a line written before reasoning was counted apart: no chunk_kinds, no usage_reasoning_tokens
    old = {k: v for k, v in line.items() if k not in {"chunk_kinds", "usage_reasoning_tokens"} | NEW_MEMBERS}
    loaded = RequestRecord.from_json(old)
    assert loaded.delivered_tokens == MAX_TOKENS and loaded.chunk_t == record.chunk_t
    assert loaded.reasoning_tokens is None and loaded.first_answer_s == loaded.ttft_s
    assert loaded.summary_entry().keys() == old.keys() & loaded.summary_entry().keys()
