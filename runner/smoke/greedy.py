"""Greedy identity (``docs/smoke.md``): what two starts emitted at T=0 for the same prompt and seed (pure).

At temperature 0 speculative decoding is lossless: a candidate that emits anything other
than what the control emits, token for token, changed the target's output. The
comparison reads the emitted sequence of each start (token ids, or, when the plan
declares the server gives none, the tokens' text as the logprobs name them, else the
text's characters), finds the first divergent position and, where the server gave the
top-2 logprobs there, the margin between them: a divergence at a position where the
two best tokens were within the registered near-tie margin is a *near tie* (the
arithmetic of two kernels may order a near tie differently; seed 000's near-tie
locator), anything else is a greedy-identity failure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..measure.reply import read_frame

__all__ = ["Emitted", "GreedyComparison", "compare_greedy", "emitted_of", "top2_margin"]

CONTINUATION = 16  # tokens of each continuation a comparison keeps from the divergence on


@dataclass(frozen=True)
class Emitted:
    """What one start emitted at T=0: its sequence (ids or token texts) and each position's top logprobs."""

    sequence: tuple[Any, ...]
    basis: str                                   # "token_ids", "token_text" or "characters"
    top_logprobs: tuple[Mapping[str, float] | None, ...] = ()
    text: str = ""
    finish_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"sequence": list(self.sequence), "basis": self.basis, "text": self.text,
                "finish_reason": self.finish_reason,
                "top_logprobs": [dict(t) if t is not None else None for t in self.top_logprobs]}


def _logprobs(body: Mapping[str, Any]) -> tuple[list[str] | None, list[Mapping[str, float] | None]]:
    """The completions API's logprobs of the first choice: token texts and top logprobs per position."""
    choice = read_frame(body).choice or {}
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None, []
    tokens = lp.get("tokens")
    texts = [t for t in tokens if isinstance(t, str)] if isinstance(tokens, list) else None
    tops: list[Mapping[str, float] | None] = []
    for entry in lp.get("top_logprobs") or []:
        if isinstance(entry, dict) and all(isinstance(v, int | float) and not isinstance(v, bool)
                                           for v in entry.values()):
            tops.append({str(k): float(v) for k, v in entry.items()})
        else:
            tops.append(None)
    return (texts if texts is not None and isinstance(tokens, list) and len(texts) == len(tokens) else None), tops


def emitted_of(body: Any, compare: str) -> Emitted | None:
    """The emitted sequence of a non-streamed completion answer (``None``: no choice to read)."""
    if not isinstance(body, dict):
        return None
    choice = read_frame(body).choice
    if choice is None:
        return None
    raw = choice.get("text")
    text = raw if isinstance(raw, str) else ""
    finish = choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None
    texts, tops = _logprobs(body)
    ids = choice.get("token_ids")
    if compare == "token_ids":
        if not isinstance(ids, list) or not all(type(t) is int for t in ids):
            return None
        return Emitted(tuple(ids), "token_ids", tuple(tops), text, finish)
    if texts is not None:
        return Emitted(tuple(texts), "token_text", tuple(tops), text, finish)
    return Emitted(tuple(text), "characters", (), text, finish)


def top2_margin(top: Mapping[str, float] | None) -> float | None:
    """The gap (nats) between the two best logprobs at a position (``None``: fewer than two given)."""
    if not top or len(top) < 2:
        return None
    best, second = sorted(top.values(), reverse=True)[:2]
    return best - second


@dataclass(frozen=True)
class GreedyComparison:
    identical: bool
    position: int | None            # the first divergent position (0-based); None when identical
    margin: float | None            # the smaller top-2 margin of the two starts there, where known
    near_tie: bool
    reference_continuation: tuple[Any, ...] = ()
    candidate_continuation: tuple[Any, ...] = ()

    def summary(self, reference: str, start: str, basis: str) -> str:
        if self.identical:
            return f"{start} emitted what {reference} emitted at T=0 ({basis})"
        where = f"{start} diverges from {reference} at position {self.position} ({basis})"
        margin = "" if self.margin is None else f", top-2 margin {self.margin:.4f} nats"
        return where + margin + (": a near tie" if self.near_tie else "")


def compare_greedy(reference: Emitted, candidate: Emitted, near_tie_margin: float | None) -> GreedyComparison:
    """Compare two T=0 sequences; a shorter one that is a prefix of the other diverges where it ends."""
    a, b = reference.sequence, candidate.sequence
    if reference.basis != candidate.basis:  # one server named its tokens, the other did not: compare characters
        reference, candidate = _characters(reference), _characters(candidate)
        a, b = reference.sequence, candidate.sequence
    position = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if position is None and len(a) != len(b):
        position = min(len(a), len(b))
    if position is None:
        return GreedyComparison(True, None, None, False)
    margins = [m for m in (_at(reference.top_logprobs, position), _at(candidate.top_logprobs, position))
               if m is not None]
    margin = min(margins) if margins else None
    near = margin is not None and near_tie_margin is not None and margin <= near_tie_margin
    return GreedyComparison(False, position, margin, near, tuple(a[position:position + CONTINUATION]),
                            tuple(b[position:position + CONTINUATION]))


def _characters(emitted: Emitted) -> Emitted:
    return Emitted(tuple(emitted.text), "characters", (), emitted.text, emitted.finish_reason)


def _at(tops: Sequence[Mapping[str, float] | None], position: int) -> float | None:
    return top2_margin(tops[position]) if position < len(tops) else None
