"""Build rule inputs for the tests: a repeat's pooled figures split over its two family waves."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("filings", "opinions")
STARTS = ("s1", "s2", "s3")


@dataclass(frozen=True)
class Rep:
    """The pooled figures of one (start, cell, repeat); split in halves over the two family waves."""

    rounds: int = 1000
    accepted: int = 1000
    decode_s: float = 20.0
    tokens: int = 2000
    client_decode_s: float = 20.0
    ttft: tuple[float, ...] = (0.1, 0.1, 0.1, 0.1)
    split: tuple[float, float] = field(default=(0.5, 0.5))

    def waves(self, start: str, cell: str, repeat: int) -> list[dict[str, Any]]:
        r0, a0, t0 = self.rounds // 2, self.accepted // 2, self.tokens // 2
        half = len(self.ttft) // 2
        parts = [(r0, a0, t0, self.ttft[:half]),
                 (self.rounds - r0, self.accepted - a0, self.tokens - t0, self.ttft[half:])]
        out = []
        for family, share, (r, a, t, tt) in zip(FAMILIES, self.split, parts, strict=True):
            out.append({"start": start, "cell": cell, "repeat": repeat, "family": family,
                        "rounds": r, "accepted": a, "decode_s": self.decode_s * share, "ttft_s": list(tt),
                        "client_tokens_after_first": t, "client_decode_s": self.client_decode_s * share})
        return out


def win2_input(cells: dict[str, dict[str, list[Rep]]], *,
               caps: tuple[int | None, int | None, int | None] = (2300, 2300, 2300),
               production_cap: int = 2300, thermal: int = 0, params: dict[str, Any] | None = None,
               archive: list[dict[str, Any]] | None = None,
               roles: tuple[str, str, str] = ("A", "B", "A")) -> dict[str, Any]:
    waves: list[dict[str, Any]] = []
    for cell, per_start in cells.items():
        for start, reps in per_start.items():
            for r, rep in enumerate(reps, start=1):
                waves.extend(rep.waves(start, cell, r))
    return {
        "rule": "win2-v1",
        "params": params if params is not None else {"bar": 0.02, "confidence": 0.95, "guard_min_repeats": 2},
        "decision_cells": list(cells),
        "production_clock_cap_mhz": production_cap,
        "starts": {s: {"role": role, "clock_cap_mhz": cap} for s, role, cap in zip(STARTS, roles, caps, strict=True)},
        "thermal_dialbacks_in_hold": thermal,
        "waves": waves,
        "archive": archive if archive is not None else [],
    }


def same(rep: Rep, n: int = 3) -> list[Rep]:
    return [rep] * n


PP3_BLOCKS = ("A1", "B1", "B2", "A2")
CONTEXTS = ("short", "32k", "150k")


def pp3_request(block: str, family: str, context: str, tokens: int = 900, decode_s: float = 10.0,
                ttft: float = 0.5, p95: float = 30.0, status: str = "ok") -> dict[str, Any]:
    return {"block": block, "arm": block[0], "family": family, "context": context, "status": status,
            "delivered_tokens": tokens, "decode_s": decode_s, "ttft_s": ttft, "round_ms_p95": p95}


def pp3_input(*, families: tuple[str, ...] = ("f1", "f2"),
              a_tokens: int = 900, b_tokens_by_family: dict[str, int] | None = None,
              params: dict[str, Any] | None = None, gates_passed: bool = True,
              failures: list[str] | None = None) -> dict[str, Any]:
    """Every block runs every (family, context); A delivers ``a_tokens`` in 10 s, B per family."""
    b_tokens = b_tokens_by_family or {f: 1000 for f in families}
    requests = []
    for block in PP3_BLOCKS:
        for family in families:
            for context in CONTEXTS:
                n = a_tokens if block[0] == "A" else b_tokens[family]
                requests.append(pp3_request(block, family, context, tokens=n))
    return {"rule": "pp3-v1",
            "params": params if params is not None else {"min_gain": 0.05, "bootstrap": 2000, "seed": 4103,
                                                         "interval": 0.90, "max_regression": 0.05},
            "gates_passed": gates_passed, "failures": failures or [], "requests": requests}


def find(requests: list[dict[str, Any]], block: str, family: str, context: str) -> dict[str, Any]:
    for r in requests:
        if (r["block"], r["family"], r["context"]) == (block, family, context):
            return r
    raise KeyError((block, family, context))


def clone(value: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(value)
