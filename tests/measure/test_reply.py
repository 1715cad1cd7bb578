"""The one OpenAI reply reader: the measurement client and the probes read a reply the same way."""

from __future__ import annotations

import json
import re
from pathlib import Path

from runner.measure import read_frame
from runner.measure.record import FINISH_REASON_BYTES, SERVER_STRING_BYTES
from runner.measure.request import _Progress
from runner.rehearsal.probe import _json_parts, _stream_parts

REPO = Path(__file__).resolve().parents[2]


def test_a_completion_a_chat_delta_and_a_chat_message_give_their_text() -> None:
    assert read_frame({"choices": [{"text": "a"}]}).text == "a"
    assert read_frame({"choices": [{"delta": {"content": "b"}}]}).text == "b"
    assert read_frame({"choices": [{"message": {"content": "c"}}]}).text == "c"
    assert read_frame({"choices": [{"text": None, "delta": {"content": "d"}}]}).text == "d"


def test_no_choice_to_read() -> None:
    for obj in ({}, {"choices": []}, {"choices": "x"}, {"choices": ["x"]}, {"choices": {"0": {}}}):
        frame = read_frame(obj)
        assert frame.choice is None and frame.text is None and frame.finish_reason is None
    assert read_frame({"choices": [], "usage": {"completion_tokens": 3}}).usage_only
    assert not read_frame({"usage": {"completion_tokens": 3}}).usage_only


def test_token_ids_only_when_a_list() -> None:
    assert read_frame({"choices": [{"token_ids": [1, 2]}]}).token_ids == [1, 2]
    assert read_frame({"choices": [{"token_ids": "1,2"}]}).token_ids is None


def test_finish_and_stop_reasons_are_bounded() -> None:
    frame = read_frame({"choices": [{"finish_reason": "x" * 500, "stop_reason": "y" * 5000}]})
    assert frame.finish_reason is not None and len(json.dumps(frame.finish_reason, ensure_ascii=False).encode()) <= FINISH_REASON_BYTES
    assert len(json.dumps(frame.stop_reason, ensure_ascii=False).encode()) <= SERVER_STRING_BYTES
    assert read_frame({"choices": [{"finish_reason": {"odd": 1}}]}).finish_reason == '{"odd": 1}'
    going = read_frame({"choices": [{"text": "t", "stop_reason": "s"}]})
    assert going.finish_reason is None and going.stop_reason is None


def test_error_frames_nested_and_flat() -> None:
    assert read_frame({"error": {"message": "no"}}).error
    assert read_frame({"object": "error", "message": "no"}).error
    assert not read_frame({"choices": [{"text": "ok"}]}).error


FRAMES = [
    {"id": "r1", "choices": [{"text": "Hel", "token_ids": [5, 6]}]},
    {"choices": [{"text": "lo", "token_ids": [7]}]},
    {"choices": [{"text": "", "token_ids": [], "finish_reason": "stop", "stop_reason": 2}]},
    {"choices": [], "usage": {"completion_tokens": 3, "prompt_tokens": 4}},
]


def test_one_reply_reads_the_same_to_the_client_and_to_a_probe() -> None:
    """The same stream, folded by the measurement client and by the rehearsal's probe parts."""
    client = _Progress(send_t=0.0, chunk_cap=100)
    client.token_ids = []
    for number, frame in enumerate(FRAMES):
        client.frame(json.dumps(frame), float(number))
    stream = "".join(f"data: {json.dumps(frame)}\n\n" for frame in FRAMES) + "data: [DONE]\n\n"
    _last, parts = _stream_parts(stream.encode())
    assert parts["text"] == "Hello" and parts["token_ids"] == client.token_ids == [5, 6, 7]
    assert parts["finish_reason"] == client.finish_reason == "stop"
    assert parts["stop_reason"] == client.stop_reason == 2
    assert parts["completion_tokens"] == client.usage["completion_tokens"] == 3
    assert parts["usage_chunk"] and parts["done"]
    whole = {"choices": [{"text": "Hello", "token_ids": [5, 6, 7], "finish_reason": "length"}]}
    one = _Progress(send_t=0.0, chunk_cap=100)
    one.whole_answer(json.dumps(whole).encode(), 1.0)
    assert _json_parts(whole)["finish_reason"] == one.finish_reason == "length"


def test_no_other_client_module_reads_choices() -> None:
    """Outside the simulator (which writes replies), only the reader looks inside ``choices``."""
    readers = []
    for path in sorted((REPO / "runner").rglob("*.py")):
        if "sim" in path.relative_to(REPO / "runner").parts[:1]:
            continue
        if re.search(r"""["']choices["']""", path.read_text()):
            readers.append(str(path.relative_to(REPO)))
    assert readers == ["runner/measure/reply.py"]
