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

A near tie is followed (``SmokeSession.greedy``): the candidate continues teacher-forced
from the reference's token there, and the comparison goes on (:func:`first_divergence`
from an offset); :func:`judged` makes the verdict over every divergence found: a failure
when any lies outside the margin, a near tie only when all lie within it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..measure.reply import read_frame

__all__ = ["Divergence", "Emitted", "GreedyComparison", "comparable", "compare_greedy", "emitted_of",
           "first_divergence", "judged", "top2_margin"]

CONTINUATION = 16  # tokens of each continuation a comparison keeps from the divergence on


@dataclass(frozen=True)
class Emitted:
    """What one start emitted at T=0: its sequence (ids or token texts) and each position's top logprobs."""

    sequence: tuple[Any, ...]
    basis: str                                   # "token_ids", "token_text" or "characters"
    top_logprobs: tuple[Mapping[str, float] | None, ...] = ()
    text: str = ""
    finish_reason: str | None = None
    prompt_ids: tuple[int, ...] | None = None   # the prompt's token ids, where the server gave them

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
        prompt = choice.get("prompt_token_ids")
        known = tuple(prompt) if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt) else None
        return Emitted(tuple(ids), "token_ids", tuple(tops), text, finish, known)
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
class Divergence:
    """One position where the two starts' T=0 tokens differ, and each one's top-2 margin there."""

    position: int                    # 0-based, in the whole continuation
    reference: Any                   # the reference's token there (None: its sequence ended before)
    candidate: Any
    reference_margin: float | None
    candidate_margin: float | None
    near_tie: bool

    @property
    def margin(self) -> float | None:
        """The smaller of the two starts' margins, where known."""
        known = [m for m in (self.reference_margin, self.candidate_margin) if m is not None]
        return min(known) if known else None

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "reference": self.reference, "candidate": self.candidate,
                "reference_margin": self.reference_margin, "candidate_margin": self.candidate_margin,
                "margin": self.margin, "near_tie": self.near_tie}


@dataclass(frozen=True)
class GreedyComparison:
    """Greedy identity's verdict: the divergences found, and the one that decides (the first outside the
    margin, else the first near tie)."""

    identical: bool
    position: int | None            # the deciding divergent position (0-based); None when identical
    margin: float | None            # the smaller top-2 margin of the two starts there, where known
    near_tie: bool                  # every divergence found was within the registered margin
    reference_continuation: tuple[Any, ...] = ()
    candidate_continuation: tuple[Any, ...] = ()
    divergences: tuple[Divergence, ...] = ()
    compared: int = 0               # positions compared (the forced continuations included)
    unfollowed: str | None = None   # why a near tie was not followed to the end, if it was not

    def summary(self, reference: str, start: str, basis: str) -> str:
        if self.identical:
            return f"{start} emitted what {reference} emitted at T=0 ({basis})"
        where = f"{start} diverges from {reference} at position {self.position} ({basis})"
        margin = "" if self.margin is None else f", top-2 margin {self.margin:.4f} nats"
        ties = [d for d in self.divergences if d.near_tie]
        if self.near_tie:
            more = "" if len(ties) < 2 else f" ({len(ties)} near ties)"
            if self.unfollowed:
                return f"{where}{margin}: a near tie{more} ({self.unfollowed})"
            return f"{where}{margin}: a near tie{more}, followed teacher-forced over {self.compared} positions"
        if ties:
            first = ties[0]
            plural = "s" if len(ties) > 1 else ""
            return (f"{where}{margin}, past {len(ties)} near tie{plural} (the first at position {first.position}, "
                    f"margin {first.margin:.4f} nats) followed teacher-forced")
        return where + margin

    def to_json(self) -> dict[str, Any]:
        return {"position": self.position, "margin": self.margin, "near_tie": self.near_tie,
                "reference_continuation": list(self.reference_continuation),
                "candidate_continuation": list(self.candidate_continuation),
                "divergences": [d.to_json() for d in self.divergences], "compared": self.compared,
                "unfollowed": self.unfollowed}


def first_divergence(reference: Emitted, candidate: Emitted, near_tie_margin: float | None,
                     offset: int = 0) -> Divergence | None:
    """The first position where ``candidate`` differs from ``reference`` from ``offset`` on (``candidate``'s
    own positions count from ``offset``: a forced continuation); a shorter one that is a prefix of the
    other diverges where it ends."""
    a, b = reference.sequence[offset:], candidate.sequence
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if i is None and len(a) != len(b):
        i = min(len(a), len(b))
    if i is None:
        return None
    ref_margin = _at(reference.top_logprobs, offset + i)
    cand_margin = _at(candidate.top_logprobs, i)
    known = [m for m in (ref_margin, cand_margin) if m is not None]
    near = bool(known) and near_tie_margin is not None and min(known) <= near_tie_margin
    return Divergence(offset + i, a[i] if i < len(a) else None, b[i] if i < len(b) else None, ref_margin,
                      cand_margin, near)


def comparable(reference: Emitted, candidate: Emitted) -> tuple[Emitted, Emitted]:
    """The two sequences on one basis: when one server named its tokens and the other did not, characters."""
    if reference.basis != candidate.basis:
        return _characters(reference), _characters(candidate)
    return reference, candidate


def compare_greedy(reference: Emitted, candidate: Emitted, near_tie_margin: float | None) -> GreedyComparison:
    """Compare two T=0 sequences at their first divergence (nothing followed)."""
    reference, candidate = comparable(reference, candidate)
    found = first_divergence(reference, candidate, near_tie_margin)
    if found is None:
        return GreedyComparison(True, None, None, False, compared=len(reference.sequence))
    return judged(reference, [(0, candidate)], [found], None)


def judged(reference: Emitted, segments: Sequence[tuple[int, Emitted]], found: Sequence[Divergence],
           unfollowed: str | None) -> GreedyComparison:
    """The verdict over every divergence found: ``segments`` are the candidate's continuations (the first
    free, each later one forced from its offset), ``found`` the divergence each ended on."""
    deciding = next((d for d in found if not d.near_tie), found[0])
    at = next(i for i, d in enumerate(found) if d is deciding)
    offset, segment = segments[at]
    p = deciding.position
    compared = min(len(reference.sequence), max(o + len(e.sequence) for o, e in segments))
    return GreedyComparison(False, p, deciding.margin, all(d.near_tie for d in found),
                            tuple(reference.sequence[p:p + CONTINUATION]),
                            tuple(segment.sequence[p - offset:p - offset + CONTINUATION]), tuple(found), compared,
                            unfollowed)


def _characters(emitted: Emitted) -> Emitted:
    return Emitted(tuple(emitted.text), "characters", (), emitted.text, emitted.finish_reason)


def _at(tops: Sequence[Mapping[str, float] | None], position: int) -> float | None:
    return top2_margin(tops[position]) if position < len(tops) else None
