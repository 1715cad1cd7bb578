"""``tally chain preflight``: serving state, the HOLD, and placeholders only while the marker is present.

Read-only: it runs the site's probes and compares them with the ledger; it appends nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..state.replay import replay

if TYPE_CHECKING:
    from ledger.store import Ledger

    from ..drivers.base import HostDriver

__all__ = ["chain_preflight"]


def chain_preflight(ledger: Ledger, driver: HostDriver, window: str | None = None) -> dict[str, Any]:
    """Probe the site and compare with the ledger's state. Appends nothing: a window's own
    preflight is the first host action of `tally window run --execute`. ``window`` only fills
    the site commands' ``{window}`` placeholder."""
    state = replay(ledger)
    marker = state.marker
    lines = []
    ok = True
    serving = driver.run("preflight", None, {"window": window or "-"})
    facts = serving.facts
    lines.append(f"serving: {facts.get('serving')} (arm {facts.get('arm')}, engine {facts.get('engine')}); "
                 f"ledger says production {state.production}")
    ok &= serving.ok
    hold = state.hold
    held = f"owned by {hold.owner} since seq {hold.seq}" if hold else "none"
    lines.append(f"HOLD: {held}")
    proofs: dict[str, bool] = {}
    if marker is not None:
        lines.append(f"marker: set by window {marker.window} at seq {marker.seq} "
                     f"(production snapshot {str(marker.production_snapshot_sha256)[:16]})")
        for host in driver.hosts:
            proof = driver.run("placeholder_proof", host, {"window": window or "-"})
            proofs[host] = proof.ok
            ok &= proof.ok
            lines.append(f"placeholder {host}: {'held' if proof.ok else 'NOT held'}")
        if facts.get("serving") == "up":
            ok = False
            lines.append("INCONSISTENT: the marker says production is down but it serves")
    else:
        lines.append("marker: none (placeholders not probed)")
        if state.production == "up" and facts.get("serving") not in ("up", None):
            lines.append(f"note: the ledger says production up, the site says {facts.get('serving')}")
    lines.insert(0, f"chain preflight: {'OK' if ok else 'FAIL'}")
    return {"ok": bool(ok), "serving": facts, "hold": None if hold is None else hold.to_json(),
            "marker": None if marker is None else marker.to_json(), "placeholders": proofs, "lines": lines}
