"""Deterministic synthetic prompt families for demos and tests (pure).

Two families in the spirit of seed 000's public sources, ``opinions`` (court
opinions) and ``filings`` (company filings), each with short and long prompts. The
same name, seed and sizes always give the same prompts, hence the same file sha256.
"""

from __future__ import annotations

import random

from .family import Prompt

__all__ = ["FAMILIES", "synthetic_family"]

_VOCAB = {
    "opinions": (
        "court", "held", "appeal", "statute", "plaintiff", "defendant", "judgment", "reversed", "affirmed",
        "remand", "jurisdiction", "evidence", "trial", "motion", "claim", "contract", "liability", "damages",
        "precedent", "circuit", "opinion", "dissent", "majority", "review", "standard", "error", "record",
    ),
    "filings": (
        "revenue", "quarter", "income", "margin", "segment", "risk", "liquidity", "capital", "expenses",
        "operating", "cash", "flow", "guidance", "shares", "dividend", "debt", "assets", "fiscal", "year",
        "growth", "costs", "tax", "reported", "increase", "decrease", "million", "percent",
    ),
}
_GLUE = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "as", "with", "by", "on", "was", "were")
_ASK = {
    "opinions": "Summarise the holding of the following opinion and the reasoning behind it.",
    "filings": "Summarise the following filing excerpt for an analyst, naming every figure it reports.",
}
FAMILIES = tuple(_VOCAB)


def _passage(rng: random.Random, family: str, words: int) -> str:
    vocab = _VOCAB[family]
    out: list[str] = []
    sentence = 0
    for i in range(words):
        word = rng.choice(vocab) if rng.random() < 0.55 else rng.choice(_GLUE)
        if sentence == 0:
            word = word.capitalize()
        sentence += 1
        if sentence >= rng.randint(8, 18) or i == words - 1:
            word += "."
            sentence = 0
        out.append(word)
    return " ".join(out)


def synthetic_family(name: str, *, seed: int = 0, short: int = 4, long: int = 2,
                     short_words: tuple[int, int] = (24, 64),
                     long_words: tuple[int, int] = (1500, 2500)) -> tuple[Prompt, ...]:
    """``short`` short prompts then ``long`` long ones, ids ``<name>-s01``/``<name>-l01``..."""
    if name not in _VOCAB:
        raise ValueError(f"unknown synthetic family {name!r}; known: {', '.join(FAMILIES)}")
    rng = random.Random(f"tally-family|{name}|{seed}")
    prompts: list[Prompt] = []
    for kind, count, (low, high) in (("short", short, short_words), ("long", long, long_words)):
        for i in range(1, count + 1):
            text = f"{_ASK[name]}\n\n{_passage(rng, name, rng.randint(low, high))}"
            prompts.append(Prompt(f"{name}-{kind[0]}{i:02d}", text, kind))
    return tuple(prompts)
