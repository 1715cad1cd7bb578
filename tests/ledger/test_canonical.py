"""Canonical form: the fast path gives rfc8785's bytes; payload rules name the offending path."""

from __future__ import annotations

import json
import math

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from ledger.canonical import MAX_INT, canonical, check_payload
from ledger.errors import PayloadError

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_INT, max_value=MAX_INT)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not (MAX_INT < abs(f) < 1e21))
    | st.text()
)
keys = st.text() | st.sampled_from(["a", "b", "\u00e9", "\ue000", "\U0001f600", "\ud7ff", "A", "aa", ""])
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(keys, inner, max_size=5), max_leaves=30
)
json_objects = st.dictionaries(keys, json_values, max_size=6)


@given(json_values)
def test_canonical_equals_rfc8785(value: object) -> None:
    assert canonical(value) == rfc8785.dumps(value)


@given(st.dictionaries(st.text(alphabet=st.characters(max_codepoint=0xD7FF)), st.text() | st.integers(-MAX_INT, MAX_INT)))
def test_fast_path_equals_rfc8785(value: dict[str, object]) -> None:
    assert canonical(value) == rfc8785.dumps(value)


def test_key_order_is_utf16_not_code_points() -> None:
    value = {"\ue000": 1, "\U0001f600": 2}
    assert canonical(value) == rfc8785.dumps(value)
    assert canonical(value).decode().index("\U0001f600") < canonical(value).decode().index("\ue000")


def test_numbers_follow_ecmascript() -> None:
    assert canonical({"a": 1.0, "b": 1e21, "c": 1e-7, "d": -0.0, "e": 0.1}) == b'{"a":1,"b":1e+21,"c":1e-7,"d":0,"e":0.1}'


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"x": {"y": math.nan}}, "payload.x.y: NaN is not allowed"),
        ({"x": [1, math.inf]}, "payload.x[1]: Infinity is not allowed"),
        ({"n": 2**60}, "payload.n: integer 1152921504606846976 is outside +/-(2^53-1)"),
        ({"n": -(2**53)}, "payload.n: integer"),
        ({"f": 2.0**53}, "payload.f: number 9007199254740992.0 reads back as an integer"),
        ({"s": "\ud800"}, "payload: string is not valid Unicode"),
        ({"b": b"bytes"}, "payload.b: bytes is not a JSON value"),
        ({1: "x"}, "payload: object key 1 is not a string"),
        ([1, 2], "payload: must be a JSON object, not list"),
        ("text", "payload: must be a JSON object, not str"),
    ],
)
def test_payload_rules_name_the_path(payload: object, message: str) -> None:
    with pytest.raises(PayloadError) as info:
        check_payload(payload)
    assert str(info.value).startswith(message)


def test_integer_limits_are_inclusive() -> None:
    assert check_payload({"max": MAX_INT, "min": -MAX_INT}) == json.dumps(
        {"max": MAX_INT, "min": -MAX_INT}, separators=(",", ":")).encode()
