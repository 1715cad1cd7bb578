"""An admission's own probe list (``tally rehearse --probes PROBES.jsonl``), each with its expected outcome.

One JSON object a line (blank lines and lines starting with ``#`` are skipped)::

    {"name": "r16-terminator", "path": "/v1/completions",
     "body": {"prompt": "Stop here.", "allowed_token_ids": [1]},
     "expect": {"status": 200, "finish_reason": "stop"}}
    {"name": "r16-logit-bias", "path": "/v1/completions",
     "body": {"prompt": "Stop here.", "logit_bias": {"1": 100}},
     "expect": {"status": 400, "error_contains": "speculative decoding"}}

``path`` is ``/v1/completions`` or ``/v1/chat/completions``. Every probe is tiny, as the
fixed ones: ``max_tokens`` defaults to 8 and more is refused (so are ``max_completion_tokens``
or ``min_tokens`` over 8, ``n`` or ``best_of`` over 1 and ``stream``), ``priority`` is 10
(another value is refused), and ``model`` is filled in when the rehearsal names one.
``expect.status`` (100..499: a 5xx is never an expected answer, it is "no answer, rerun")
is required; ``finish_reason`` and ``error_contains`` (a case-insensitive part of the
error message) are optional. Names are unique and not the fixed probes' names.

The file is hostile input: at most :data:`MAX_FILE_BYTES` and :data:`MAX_PROBES` probes,
each line strict JSON of at most :data:`MAX_LINE_BYTES` with bounded nesting; anything
else is refused with one line naming the line (exit 2), before any probe is sent.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from ledger.errors import FormatError
from ledger.strictjson import read_json

from .probe import MAX_TOKENS, PRIORITY, Outcome, Probe, error_of, has_choice, token_count

__all__ = ["MAX_FILE_BYTES", "MAX_LINE_BYTES", "MAX_PROBES", "PATHS", "Expectation", "ExpectedProbe", "ProbeList",
           "judge_expected", "read_probe_list"]

MAX_FILE_BYTES = 1 << 20
MAX_LINE_BYTES = 64 << 10
MAX_PROBES = 64
PATHS = ("/v1/completions", "/v1/chat/completions")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_MEMBERS = {"name", "path", "body", "expect", "description"}
_EXPECT = {"status", "finish_reason", "error_contains"}
_AT_MOST_ONE = ("n", "best_of")
_TOKEN_LIMITS = ("max_tokens", "max_completion_tokens", "min_tokens")


@dataclass(frozen=True)
class Expectation:
    status: int
    finish_reason: str | None = None
    error_contains: str | None = None

    def describe(self) -> str:
        text = f"HTTP {self.status}"
        if self.finish_reason is not None:
            text += f", finish_reason {self.finish_reason}"
        if self.error_contains is not None:
            text += f", error message containing {self.error_contains!r}"
        return text

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status}
        if self.finish_reason is not None:
            out["finish_reason"] = self.finish_reason
        if self.error_contains is not None:
            out["error_contains"] = self.error_contains
        return out


@dataclass(frozen=True)
class ExpectedProbe(Probe):
    """A probe from the admission's list: what it sends and the outcome it expects."""

    expectation: Expectation = Expectation(200)


@dataclass(frozen=True)
class ProbeList:
    probes: tuple[ExpectedProbe, ...]
    sha256: str
    source: str

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "sha256": self.sha256, "count": len(self.probes),
                "expected": {p.name: p.expectation.to_json() for p in self.probes}}


def _fail(where: str, message: str) -> FormatError:
    return FormatError(f"{where}: {message}")


def _expectation(value: Any, where: str) -> Expectation:
    if not isinstance(value, dict):
        raise _fail(where, "expect must be an object with a status")
    unknown = sorted(set(value) - _EXPECT)
    if unknown:
        raise _fail(where, f"expect has unknown member {unknown[0][:40]!r} (members: {', '.join(sorted(_EXPECT))})")
    status = value.get("status")
    if type(status) is not int or not 100 <= status <= 499:
        raise _fail(where, "expect.status must be an HTTP status 100..499 (a 5xx is no answer, never expected)")
    out: list[str | None] = []
    for key in ("finish_reason", "error_contains"):
        item = value.get(key)
        if item is not None and (not isinstance(item, str) or not item or len(item) > 200):
            raise _fail(where, f"expect.{key} must be a non-empty string of at most 200 characters")
        out.append(item)
    return Expectation(status, out[0], out[1])


def _body(value: Any, where: str, model: str | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, "body must be a JSON object")
    body = dict(value)
    for key in _TOKEN_LIMITS:
        item = body.get(key)
        if item is not None and (type(item) is not int or item > MAX_TOKENS):
            raise _fail(where, f"body.{key} {item!r}: a rehearsal probe generates at most {MAX_TOKENS} tokens")
    for key in _AT_MOST_ONE:
        item = body.get(key)
        if item is not None and item != 1:
            raise _fail(where, f"body.{key} {item!r}: a rehearsal probe asks for one completion")
    if body.get("stream") not in (None, False):
        raise _fail(where, "body.stream: rehearsal probes are not streamed")
    if "priority" in body and body["priority"] != PRIORITY:
        raise _fail(where, f"body.priority {body['priority']!r}: every rehearsal probe runs at priority {PRIORITY}")
    body.setdefault("max_tokens", MAX_TOKENS)
    body["priority"] = PRIORITY
    body["stream"] = False
    if model and "model" not in body:
        body["model"] = model
    return body


def read_probe_list(data: bytes, source: str, *, reserved: tuple[str, ...] = (),
                    model: str | None = None) -> ProbeList:
    """Validate a probe list (``FormatError`` naming the line); ``reserved`` are names already taken."""
    if len(data) > MAX_FILE_BYTES:
        raise FormatError(f"{source} is over the {MAX_FILE_BYTES}-byte limit of a probe list")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(f"{source} is not UTF-8") from None
    probes: list[ExpectedProbe] = []
    names: set[str] = set()
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{source} line {number}"
        if len(line.encode()) > MAX_LINE_BYTES:
            raise _fail(where, f"over the {MAX_LINE_BYTES}-byte limit of a line")
        if len(probes) == MAX_PROBES:
            raise _fail(where, f"more than {MAX_PROBES} probes")
        obj = read_json(line, where, max_bytes=MAX_LINE_BYTES)
        if not isinstance(obj, dict):
            raise _fail(where, "not a JSON object")
        unknown = sorted(set(obj) - _MEMBERS)
        if unknown:
            raise _fail(where, f"unknown member {unknown[0][:40]!r} (members: {', '.join(sorted(_MEMBERS))})")
        name = obj.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise _fail(where, "name must be letters, digits, . _ - (at most 64)")
        if name in names or name in reserved:
            raise _fail(where, f"probe name {name!r} is already taken")
        names.add(name)
        path = obj.get("path")
        if path not in PATHS:
            raise _fail(where, f"path must be one of {', '.join(PATHS)}")
        description = obj.get("description", "")
        if not isinstance(description, str):
            raise _fail(where, "description must be a string")
        expectation = _expectation(obj.get("expect"), where)
        probes.append(ExpectedProbe(name, str(path), _body(obj.get("body"), where, model),
                                    description or expectation.describe(), expectation))
    if not probes:
        raise FormatError(f"{source} holds no probes (a probe list given must rehearse something)")
    return ProbeList(tuple(probes), hashlib.sha256(data).hexdigest(), source)


def judge_expected(probe: Probe, status: int, body: Any, parts: dict[str, Any]) -> tuple[bool, Outcome, str]:
    """(ok, outcome, detail): the answer against the probe's expected outcome."""
    expectation = probe.expectation if isinstance(probe, ExpectedProbe) else Expectation(200)
    if status >= 500:
        return False, "no_answer", f"HTTP {status}"
    _error, message = error_of(body)
    if status != expectation.status:
        tail = f": {message[:200]}" if message else ""
        return False, "wrong", f"HTTP {status}, expected {expectation.status}{tail}"
    if expectation.error_contains is not None and expectation.error_contains.lower() not in message.lower():
        return False, "wrong", f"HTTP {status} without {expectation.error_contains!r} in the message: {message[:200]}"
    if status == 200:
        if not has_choice(body):
            return False, "wrong", "HTTP 200 without a choice"
        tokens = token_count(parts)
        if isinstance(tokens, int) and tokens > MAX_TOKENS:
            return False, "wrong", f"generated {tokens} tokens, more than {MAX_TOKENS}"
    if expectation.finish_reason is not None and parts.get("finish_reason") != expectation.finish_reason:
        return False, "wrong", f"finish_reason {parts.get('finish_reason')!r}, expected {expectation.finish_reason!r}"
    return True, "pass", f"as expected: {expectation.describe()}"
