"""Registering a plan (``window.registered``) and reading a registered plan back.

The plan's JSON form and its ``plan_sha256`` go into the payload; the TOML source and
the family files travel as blobs (their digests are in the payload and in the plan), so
a window can be re-run or audited from the ledger alone. A window id is registered at
most once: the same plan again is a no-op, a different plan is refused.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ledger.errors import FormatError, IntegrityError, PolicyError

from ..events import payloads as p
from ..events.catalogue import WINDOW_STREAM_PREFIX, WindowLog, append_window_event, read_payload
from .model import Plan
from .parse import LoadedPlan, parse_plan, read_family_file

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.keys import Signer
    from ledger.store import Ledger

    from ..measure.family import Prompt

__all__ = [
    "Registration",
    "WindowNotRegistered",
    "family_prompts",
    "register_plan",
    "registered",
    "registered_plan",
    "window_log",
]

PLAN_MEDIA_TYPE = "application/toml"
FAMILY_MEDIA_TYPE = "application/x-ndjson"


class WindowNotRegistered(FormatError):
    """A window id the ledger holds no registration for (bad input: exit 2). The one such error."""

    def __init__(self, window: str) -> None:
        super().__init__(f"window {window} is not registered (run `tally window register PLAN.toml`)")
        self.window = window


@dataclass(frozen=True)
class Registration:
    window: str
    plan_sha256: str
    plan: Plan
    seq: int
    already: bool = False
    family_blobs: Mapping[str, str] = field(default_factory=dict)  # family -> "sha256:<hex>" of its file


def registered(ledger: Ledger, window: str) -> Registration | None:
    """The window's registration (its first ``window.registered``), or None."""
    for event in ledger.events(stream=WINDOW_STREAM_PREFIX + window, types=["window.registered"]):
        recorded = read_payload(event, p.WindowRegistered)
        plan = parse_plan(recorded.plan, path=f"seq {event.seq} plan")
        blobs = {name: ref.blob for name, ref in recorded.family_files.items()}
        return Registration(window, recorded.plan_sha256, plan, event.seq, already=True, family_blobs=blobs)
    return None


def registered_plan(ledger: Ledger, window: str) -> Registration:
    """Like ``registered`` but refuses an unknown window (``WindowNotRegistered``)."""
    reg = registered(ledger, window)
    if reg is None:
        raise WindowNotRegistered(window)
    return reg


def window_log(ledger: Ledger, signer: Signer, window: str) -> WindowLog:
    """A ``WindowLog`` bound to a registered window (its id and plan digest)."""
    return WindowLog(ledger, signer, window, registered_plan(ledger, window).plan_sha256)


def register_plan(ledger: Ledger, signer: Signer, loaded: LoadedPlan) -> Registration:
    """Append ``window.registered``; the same plan again returns the existing registration."""
    from ledger.store import Blob

    plan = loaded.plan
    sha = plan.sha256
    existing = registered(ledger, plan.window_id)
    if existing is not None:
        if existing.plan_sha256 == sha:
            return existing
        raise PolicyError(
            f"window {plan.window_id} is already registered (seq {existing.seq}) with plan "
            f"{existing.plan_sha256[:16]}...; this plan is {sha[:16]}... — a changed plan is a new "
            f"registration under a new window_id"
        )
    source = Blob(loaded.source, PLAN_MEDIA_TYPE)
    families = {name: Blob(data, FAMILY_MEDIA_TYPE) for name, data in loaded.family_files.items()}
    payload = p.WindowRegistered(plan=plan.to_json(), source=p.BlobRef.of(source),
                                 family_files={name: p.BlobRef.of(blob) for name, blob in families.items()})
    event: Event = append_window_event(
        ledger, signer, plan.window_id, sha, "window.registered", payload, [source, *families.values()]
    )
    return Registration(plan.window_id, sha, plan, event.seq,
                        family_blobs={name: f"sha256:{blob.sha256}" for name, blob in families.items()})


def family_prompts(ledger: Ledger, reg: Registration) -> dict[str, dict[str, Prompt]]:
    """family -> prompt id -> prompt, read from the family files registered as blobs.

    Each file is checked against the plan's sha256, so a window runs exactly the prompts
    it registered, whatever is on disk now.
    """
    out: dict[str, dict[str, Prompt]] = {}
    for family in reg.plan.families:
        ref = reg.family_blobs.get(family.name, f"sha256:{family.sha256}")
        blob = ledger.blob(ref)
        if blob is None:
            raise IntegrityError(f"window {reg.window}: family file {family.name} ({ref[:23]}...) is not stored")
        if hashlib.sha256(blob.data).hexdigest() != family.sha256:
            raise IntegrityError(f"window {reg.window}: stored family file {family.name} does not match the plan")
        out[family.name] = read_family_file(blob.data, family.name, f"family {family.name}")
    return out
