"""The clock conditions both rules share: runs at one recorded clock cap, production's, and no dial-back.

A window's runs (win2-v1's starts, pp3-v1's blocks) compare only when each ran at the
GPU clock cap production is configured with, recorded at the run; on a site without
GPU clocks (``production_cap`` ``None``) the cap conditions do not apply, and a cap
recorded there anyway is itself a reason. A thermal dial-back inside the HOLD is a
reason too. Pure: recorded values in, reasons out (``docs/rules.md``).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["cap_reasons", "dial_back_reasons"]


def cap_reasons(caps: Mapping[str, int | None], production_cap: int | None, runs: str) -> list[str]:
    """Why the runs' recorded clock caps (run -> MHz, ``None`` when not recorded) do not allow a positive
    decision; ``runs`` names them in the reasons (``"starts"``, ``"blocks"``)."""
    if production_cap is None:  # a site without GPU clocks: the cap conditions do not apply
        capped = [run for run, cap in caps.items() if cap is not None]
        return [f"clock cap recorded for {', '.join(capped)}, but clocks do not apply on this site"] if capped else []
    reasons: list[str] = []
    unknown = [run for run, cap in caps.items() if cap is None]
    if unknown:
        reasons.append(f"clock cap not recorded for {', '.join(unknown)}")
    known = {run: cap for run, cap in caps.items() if cap is not None}
    if len(set(known.values())) > 1:
        reasons.append(f"{runs} ran at different clock caps: " + ", ".join(f"{r} {c} MHz" for r, c in known.items()))
    off = [run for run, cap in known.items() if cap != production_cap]
    if off:
        reasons.append(", ".join(f"{run} ran at {known[run]} MHz" for run in off)
                       + f"; production's configured clock cap is {production_cap} MHz")
    return reasons


def dial_back_reasons(dial_backs: int) -> list[str]:
    """A thermal dial-back inside the HOLD, as a reason (none when there was none)."""
    return [f"thermal dial-back inside the HOLD ({dial_backs} event(s))"] if dial_backs > 0 else []
