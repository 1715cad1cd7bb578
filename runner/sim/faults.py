"""Injectable faults: what the next requests, scrapes or host actions will suffer.

Faults are set in the config (``[faults]``) or at run time through
``POST /_sim/faults`` with the same shape; ``{"clear": true}`` removes them all.

=====================  ==================================================  =====================================
fault                  shape                                               effect
=====================  ==================================================  =====================================
``http_5xx``           ``{count, status=500}``                             next ``count`` completions answer
                                                                           ``status`` with vLLM's error body
``stall``              ``{count=1, after_chunks=1, seconds}``              the stream pauses ``seconds`` (real)
                                                                           after ``after_chunks`` chunks
``drop``               ``{count=1, after_chunks=1}``                       the connection is cut mid-stream
``slow_ttft``          ``{count=1, seconds}``                              first token ``seconds`` (real) later
``error_frame``        ``{count=1, after_chunks=1, message}``              an error frame inside the 200 stream
``metrics_down``       ``true`` / ``false``                                ``/metrics`` answers 503
``action_fail``        ``{action, count=1, status=500}``                   the named host action fails
``clock_cap_mismatch`` ``{cap_mhz, count=1}``                              the next start runs (and logs) this cap
``greedy_diverge``     ``{arm, position, near_tie=false, count=1}``        the next T=0 requests on ``arm`` take
                                                                           the runner-up token at ``position``
                                                                           (a near tie: top-2 margin 0.01 there)
``greedy_lossy``       ``{arm, position, count=1}``                        the next T=0 requests on ``arm`` that
                                                                           ``greedy_diverge`` spares take the
                                                                           runner-up at ``position`` (an ordinary
                                                                           margin: a lossy kernel, not a near tie)
``ignore_schema``      ``{arm="", count=1}``                               structured output answered as free
                                                                           text (``arm`` "": any arm)
``ignore_stop``        ``{arm="", count=1}``                               stop strings not honoured
``ignore_min_tokens``  ``{arm="", count=1}``                               ``min_tokens`` not honoured
``hang_after_cancel``  ``{seconds, count=1}``                              after a client leaves a stream, every
                                                                           request waits ``seconds`` (real)
``host_clock_cap``     ``{host, cap_mhz, count=1}``                        at the next start, ``host`` alone logs
                                                                           (and runs) this cap: the hosts disagree
``host_commit``        ``{host, commit, count=1}``                         the next placeholder_proof of ``host``
                                                                           reports this commit checked out there
``host_tag``           ``{host, tag="", commit="", count=1}``              the next placeholder_proof of ``host``
                                                                           reports this tag ("": none checked out)
                                                                           pointing at ``commit`` ("": the window's)
``restore_clock_cap``  ``{cap_mhz, host="", count=1}``                     the next restore brings production up
                                                                           at this cap on ``host`` ("": every host)
``backlog``            ``{waiting=0, kv_cache_usage=-1, count=1}``        the next ``count`` ``/metrics`` scrapes
                                                                           show another tenant's load: ``waiting``
                                                                           requests queued, KV usage (0..1; -1:
                                                                           as served)
``clock_line_missing`` ``{action, host="", count=1}``                      the next ``action`` (read_clock_cap or
                                                                           restore) reports no reading of ``host``
                                                                           ("": one site-wide line, no host's own)
``identity_mismatch``  ``{member, value, count=1}``                        the next start reports ``value`` as its
                                                                           host identity ``member`` (worker_identity...)
``digest_mismatch``    ``{config_digest, arm="", count=1}``                the next start of ``arm`` ("": any) reports
                                                                           this config_digest (the config's
                                                                           ``reported`` still says the arm's own)
``thermal_blip``       ``{cap_mhz, count=1}``                              the next completion dials the clock back
                                                                           to ``cap_mhz`` and it recovers as the
                                                                           request ends (a THERMAL-WATCH pair)
``warmup_unserved``    ``{count=1}``                                       the next warm-up says it sent its requests
                                                                           but none reaches the engine (its
                                                                           served-requests counter stays still)
=====================  ==================================================  =====================================
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

from ..fields import MISSING, Fields

__all__ = ["FaultState", "validate_faults"]

_SHAPES: dict[str, dict[str, tuple[str, Any]]] = {
    # kind: {field: (type, default)}; default None = required
    "http_5xx": {"count": ("int", 1), "status": ("status", 500)},
    "stall": {"count": ("int", 1), "after_chunks": ("int0", 1), "seconds": ("float", None)},
    "drop": {"count": ("int", 1), "after_chunks": ("int0", 1)},
    "slow_ttft": {"count": ("int", 1), "seconds": ("float", None)},
    "error_frame": {"count": ("int", 1), "after_chunks": ("int0", 1),
                    "message": ("str", "simulated engine failure")},
    "action_fail": {"action": ("str", None), "count": ("int", 1), "status": ("status", 500)},
    "clock_cap_mismatch": {"cap_mhz": ("int", None), "count": ("int", 1)},
    "greedy_diverge": {"arm": ("str", None), "position": ("int0", None), "near_tie": ("bool", False),
                       "count": ("int", 1)},
    "greedy_lossy": {"arm": ("str", None), "position": ("int0", None), "count": ("int", 1)},
    "ignore_schema": {"arm": ("arm", ""), "count": ("int", 1)},
    "ignore_stop": {"arm": ("arm", ""), "count": ("int", 1)},
    "ignore_min_tokens": {"arm": ("arm", ""), "count": ("int", 1)},
    "hang_after_cancel": {"seconds": ("float", None), "count": ("int", 1)},
    "host_clock_cap": {"host": ("str", None), "cap_mhz": ("int", None), "count": ("int", 1)},
    "thermal_blip": {"cap_mhz": ("int", None), "count": ("int", 1)},
    "host_commit": {"host": ("str", None), "commit": ("str", None), "count": ("int", 1)},
    "host_tag": {"host": ("str", None), "tag": ("opt", ""), "commit": ("opt", ""), "count": ("int", 1)},
    "restore_clock_cap": {"cap_mhz": ("int", None), "host": ("opt", ""), "count": ("int", 1)},
    "identity_mismatch": {"member": ("str", None), "value": ("str", None), "count": ("int", 1)},
    "clock_line_missing": {"action": ("str", None), "host": ("opt", ""), "count": ("int", 1)},
    "backlog": {"waiting": ("int0", 0), "kv_cache_usage": ("share", -1.0), "count": ("int", 1)},
    "digest_mismatch": {"config_digest": ("str", None), "arm": ("opt", ""), "count": ("int", 1)},
    "warmup_unserved": {"count": ("int", 1)},
}


def _field(f: Fields, name: str, kind: str, default: Any) -> Any:
    required = MISSING if default is None else default
    if kind == "int":
        return f.integer(name, required, low=1)
    if kind == "int0":
        return f.integer(name, required, low=0)
    if kind == "status":
        return f.integer(name, required, low=500, high=599)
    if kind == "float":
        return f.number(name, required, low=0)
    if kind == "share":   # 0..1, or -1: not set
        value = f.number(name, required, low=-1, high=1)
        if value != -1 and value < 0:
            raise f.fail(name, f"must be within 0..1, or -1 (not set), got {value}")
        return value
    if kind == "bool":
        return f.boolean(name, default)
    if kind in ("arm", "opt"):  # an arm name ("" for any arm), or an optional string ("" for none)
        return f.string(name, default)
    return f.string(name, required, nonempty=True)


def validate_faults(data: Any, where: str = "faults", *, source: str | None = None) -> dict[str, Any]:
    """Check a faults table (``FieldError`` naming the field); returns it normalised (defaults filled in)."""
    faults = Fields(data, where, source=source)
    out: dict[str, Any] = {}
    for kind in faults.data:
        if kind == "metrics_down":
            out[kind] = faults.boolean(kind)
            continue
        shape = _SHAPES.get(kind)
        if shape is None:
            raise faults.fail_here(f"unknown fault {kind!r} (faults: {', '.join([*_SHAPES, 'metrics_down'])})")
        f = faults.table(kind, required=True)
        out[kind] = {name: _field(f, name, ftype, default) for name, (ftype, default) in shape.items()}
        f.done()
    return out


class FaultState:
    """The faults still armed; thread-safe. ``take`` consumes one use of a fault."""

    def __init__(self, initial: Mapping[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._faults: dict[str, Any] = {}
        self._actions: dict[str, dict[str, Any]] = {}
        if initial:
            self.set(initial)

    def set(self, data: Mapping[str, Any]) -> None:
        """Arm faults (validated); a kind given again replaces the armed one."""
        faults = validate_faults(data)
        with self._lock:
            for kind, spec in faults.items():
                if kind == "action_fail":
                    self._actions[spec["action"]] = spec
                elif kind == "metrics_down" and not spec:
                    self._faults.pop(kind, None)
                else:
                    self._faults[kind] = spec

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()
            self._actions.clear()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            out = copy.deepcopy(self._faults)
            if self._actions:
                out["action_fail"] = [dict(spec) for spec in self._actions.values()]
            return out

    @property
    def metrics_down(self) -> bool:
        with self._lock:
            return bool(self._faults.get("metrics_down"))

    def take(self, kind: str) -> dict[str, Any] | None:
        """One use of an armed fault of ``kind`` (``None`` when none is armed)."""
        with self._lock:
            spec = self._faults.get(kind)
            if not isinstance(spec, dict):
                return None
            spec["count"] -= 1
            if spec["count"] <= 0:
                del self._faults[kind]
            return dict(spec)

    def take_for(self, kind: str, arm: str) -> dict[str, Any] | None:
        """One use of an armed fault of ``kind`` aimed at ``arm`` (or at any arm: ``arm`` "")."""
        with self._lock:
            spec = self._faults.get(kind)
            if not isinstance(spec, dict) or spec.get("arm") not in ("", arm):
                return None
            spec["count"] -= 1
            if spec["count"] <= 0:
                del self._faults[kind]
            return dict(spec)

    def take_if(self, kind: str, member: str, value: Any) -> dict[str, Any] | None:
        """One use of an armed fault of ``kind`` whose ``member`` is ``value`` (``None`` otherwise)."""
        with self._lock:
            spec = self._faults.get(kind)
            if not isinstance(spec, dict) or spec.get(member) != value:
                return None
            spec["count"] -= 1
            if spec["count"] <= 0:
                del self._faults[kind]
            return dict(spec)

    def take_action(self, action: str) -> dict[str, Any] | None:
        """One use of an armed failure of host action ``action``."""
        with self._lock:
            spec = self._actions.get(action)
            if spec is None:
                return None
            spec["count"] -= 1
            if spec["count"] <= 0:
                del self._actions[action]
            return dict(spec)
