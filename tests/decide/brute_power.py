"""Brute-force win2-v1 windows for the power model's tests: per-wave data of a known world, decided by ``win2.decide``.

Written apart from ``runner.decide.power_win2`` (Python's ``random``, wave by wave, counters
pooled by the rule itself), so agreement with the vectorised model is evidence, not a
tautology. The world: each start has an engine-session offset shared by its cells
(``cell_share`` of its variance) and each cell its own part; every wave (one per family)
has its own noise; the client decode rate is the server rate seen from the client (its
own noise ``client_sd`` on top); accepted per round has its own start and wave noise,
unrelated to the rate. A candidate ``E`` better runs at ``(1 + E)`` times the rate, so the
client decode rate moves with it and accepted per round does not.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from runner.decide import win2
from runner.decide.noise import METRICS, ControlPair

ROUNDS = 100_000          # rounds per wave: accepted per round resolves to 1e-5, ties are rare
TOKENS = 50_000           # client tokens after the first per wave


@dataclass(frozen=True)
class World:
    start_sd: float = 0.02          # the rate's start-to-start spread (log scale)
    wave_sd: float = 0.005          # each wave's own noise (a repeat pools two waves)
    cell_share: float = 1.0         # the share of the start offset common to the start's cells
    client_sd: float = 0.0          # the client decode rate's own noise on top of the rate
    accepted_start_sd: float = 0.0  # accepted per round: its own start offset ...
    accepted_wave_sd: float = 0.0   # ... and wave noise
    cells: tuple[str, ...] = ("short-b1", "32k-b1")
    repeats: int = 3


def window(world: World, effect: float, rng: random.Random) -> win2.Win2Input:
    """One window of ``world`` with the candidate (s2) truly ``effect`` better, as per-wave records."""
    shared = {s: rng.gauss(0.0, 1.0) for s in win2.STARTS}
    waves: list[win2.Wave] = []
    for cell in world.cells:
        for start in win2.STARTS:
            offset = world.start_sd * (math.sqrt(world.cell_share) * shared[start]
                                       + math.sqrt(1 - world.cell_share) * rng.gauss(0.0, 1.0))
            accepted_offset = rng.gauss(0.0, world.accepted_start_sd)
            for r in range(1, world.repeats + 1):
                for family in ("opinions", "filings"):
                    rate = 50.0 * math.exp(offset + rng.gauss(0.0, world.wave_sd))
                    if start == "s2":
                        rate *= 1.0 + effect
                    client = 0.9 * rate * math.exp(rng.gauss(0.0, world.client_sd))
                    accepted = round(ROUNDS * 1.5 * math.exp(accepted_offset + rng.gauss(0.0, world.accepted_wave_sd)))
                    waves.append(win2.Wave(len(waves), start, cell, r, family, ROUNDS, accepted,
                                           (ROUNDS + accepted) / rate, (0.1,), TOKENS, TOKENS / client))
    starts = {s: win2.StartInfo("B" if s == "s2" else "P", None) for s in win2.STARTS}
    return win2.Win2Input(win2.Win2Params(repeats=world.repeats), world.cells, None, starts, 0, tuple(waves), ())


def decisions(world: World, effect: float, n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [str(win2.decide(window(world, effect, rng))["decision"]) for _ in range(n)]


def control_pairs(world: World, n: int, seed: int) -> dict[str, list[ControlPair]]:
    """Per cell, ``n`` windows' two control starts (s1, s3) per repeat, as the rule pooled them: a pilot."""
    rng = random.Random(seed)
    out: dict[str, list[ControlPair]] = {c: [] for c in world.cells}
    for i in range(n):
        result: dict[str, Any] = win2.decide(window(world, 0.0, rng))
        for cell in world.cells:
            metrics = result["cells"][cell]["metrics"]
            out[cell].append(ControlPair(f"pilot-{i}", {m: metrics[m]["per_repeat"]["s1"] for m in METRICS},
                                         {m: metrics[m]["per_repeat"]["s3"] for m in METRICS}))
    return out


def rate(outcomes: list[str], outcome: str) -> tuple[float, float]:
    """The share of ``outcome`` and its Monte Carlo standard error."""
    p = outcomes.count(outcome) / len(outcomes)
    return p, math.sqrt(max(p * (1 - p), 1 / len(outcomes)) / len(outcomes))
