"""Field-level comparison of a recorded result with a recomputed one (for ``tally replay verdict``).

Results are compared exactly, but for the last bits of a non-integer number. JSON (RFC 8785
included) writes doubles in their shortest round-trip form, so a recorded float reads back as
the same double; a rule is deterministic on one machine, but the platform's maths (glibc's
``exp``/``log`` and numpy's loops pick CPU-specific code at run time) can differ by an ulp
between machines, so a recomputation elsewhere may differ in the 16th digit. Numbers match when
they agree to 1e-9 relative (1e-12 absolute near zero); integers, strings, verdicts and every
other leaf must be equal. Numbers compare by value (a recorded ``100`` equals a recomputed ``100.0``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Difference", "diff"]

_MISSING = object()
REL_TOL = 1e-9    # far below any threshold a rule compares with, far above an ulp (2.2e-16)
ABS_TOL = 1e-12


@dataclass(frozen=True)
class Difference:
    """One differing field: its path (``cells.short-b1.metrics.pooled_rate_tps.point``) and both values."""

    path: str
    recorded: Any
    recomputed: Any

    def __str__(self) -> str:
        return f"{self.path}: recorded {_show(self.recorded)}, recomputed {_show(self.recomputed)}"

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path,
                "recorded": None if self.recorded is _MISSING else self.recorded,
                "recomputed": None if self.recomputed is _MISSING else self.recomputed,
                "missing": "recorded" if self.recorded is _MISSING else
                           "recomputed" if self.recomputed is _MISSING else None}


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(absent)"
    return json.dumps(value, sort_keys=True)


def _close(a: float, b: float) -> bool:
    """Equal but for the last bits a platform's maths library may change (never for two integers)."""
    if isinstance(a, int) and isinstance(b, int):
        return False
    return math.isfinite(a) and math.isfinite(b) and math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def diff(recorded: Any, recomputed: Any, path: str = "") -> list[Difference]:
    """Every leaf where ``recorded`` and ``recomputed`` differ, in a stable order; empty = MATCH."""
    out: list[Difference] = []
    _walk(recorded, recomputed, path, out)
    return out


def _walk(a: Any, b: Any, path: str, out: list[Difference]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            _walk(a.get(key, _MISSING), b.get(key, _MISSING), f"{path}.{key}" if path else str(key), out)
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            _walk(a[i] if i < len(a) else _MISSING, b[i] if i < len(b) else _MISSING, f"{path}[{i}]", out)
    elif _is_number(a) and _is_number(b):
        if a != b and not _close(a, b):
            out.append(Difference(path, a, b))
    elif type(a) is not type(b) or a != b:
        out.append(Difference(path, a, b))
