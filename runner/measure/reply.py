"""The OpenAI reply reader: what one completion or chat answer, or one stream frame, says.

Every reply tally reads goes through :func:`read_frame`: the measurement client's
streamed requests (:mod:`.request`), and the rehearsal's and the smoke stage's probes
(``runner.rehearsal``, ``runner.smoke``). A frame is a parsed JSON object (a whole
answer, or one SSE ``data:`` frame); its :class:`Frame` says whether it is an error
(vLLM's ``{"error": {...}}``, or its older flat ``{"object": "error", ...}``), the
usage object as sent, and the first choice: its text (``text``, else ``delta.content``
or ``message.content``), its reasoning text where the server streams reasoning apart
(``delta.reasoning``, vLLM 0.10 and later, else ``delta.reasoning_content``, older vLLM;
the same members of ``message`` in a whole answer), its token ids, and ``finish_reason``
with ``stop_reason``.

Pure. What a frame keeps from the server is bounded: ``finish_reason`` is clipped to
:data:`.record.FINISH_REASON_BYTES` (a non-string JSON-encoded first), ``stop_reason``
to :data:`.record.SERVER_STRING_BYTES`; the text and the ids are as sent, for the
caller to bound as it keeps them. A reasoning member that is not a non-empty string is
ignored (the frame then carries no reasoning).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .record import FINISH_REASON_BYTES, SERVER_STRING_BYTES, bounded_json, clip

__all__ = ["REASONING_MEMBERS", "Frame", "error_of", "error_reason", "read_frame", "reasoning_of"]

# Where a server streams reasoning apart from the answer, in the order they are read.
REASONING_MEMBERS = ("reasoning", "reasoning_content")


@dataclass(frozen=True, slots=True)
class Frame:
    """One answer or stream frame, as read."""

    error: bool                       # an error body or error frame
    usage: Any                        # the ``usage`` member, as sent (``None``: none)
    usage_only: bool                  # ``choices: []``: a usage chunk
    choice: dict[str, Any] | None     # the first choice, when there is one (an object)
    text: Any                         # its text, ``delta.content`` or ``message.content``, as sent
    token_ids: list[Any] | None       # its ``token_ids`` when a list, as sent
    finish_reason: str | None         # clipped; ``None`` while the choice goes on
    stop_reason: Any                  # bounded; set with ``finish_reason``
    reasoning: str | None = None      # its reasoning text (a non-empty string), as sent; ``None``: none


def read_frame(obj: Mapping[str, Any]) -> Frame:
    """What the JSON object ``obj`` (one answer or one stream frame) says."""
    error = "error" in obj or obj.get("object") == "error"
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return Frame(error, obj.get("usage"), choices == [], None, None, None, None, None)
    choice = choices[0]
    text = choice.get("text")
    for key in ("delta", "message"):
        if text is None and isinstance(choice.get(key), dict):
            text = choice[key].get("content")
    ids = choice.get("token_ids")
    reason = choice.get("finish_reason")
    finish = stop = None
    if reason is not None:
        finish = clip(reason if isinstance(reason, str) else json.dumps(reason), FINISH_REASON_BYTES)
        stop = bounded_json(choice.get("stop_reason"), SERVER_STRING_BYTES)
    return Frame(error, obj.get("usage"), False, choice, text, ids if isinstance(ids, list) else None, finish, stop,
                 reasoning_of(choice))


def reasoning_of(choice: Mapping[str, Any]) -> str | None:
    """The reasoning text of a choice (its ``delta`` or ``message``): the first of
    :data:`REASONING_MEMBERS` that is a non-empty string; anything else there is ignored."""
    for key in ("delta", "message"):
        part = choice.get(key)
        if isinstance(part, dict):
            for member in REASONING_MEMBERS:
                value = part.get(member)
                if isinstance(value, str) and value:
                    return value
    return None


def error_of(body: Any) -> tuple[Any, str]:
    """The error object and its message (empty when none is given), for vLLM's nested and older flat
    error bodies and FastAPI's ``detail``; what a probe's judgement reads."""
    if isinstance(body, dict):
        if isinstance(body.get("error"), dict):
            return body["error"], str(body["error"].get("message", ""))
        if body.get("object") == "error" or "message" in body:
            return body, str(body.get("message", ""))
        if "detail" in body:
            return body, str(body["detail"])
    return body, ""


def error_reason(body: Any) -> str:
    """The message of an error body for a request's recorded reason: never empty (the body itself, cut,
    when it names no message)."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
        if body.get("detail"):
            return str(body["detail"])
    return str(body)[:300]
