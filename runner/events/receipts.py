"""tally's receipt policy: which window events have receipts, and what their Statements say.

- ``gate.result``: the in-toto test-result predicate (``result`` PASSED/FAILED, the gate
  as the test, the plan as its configuration);
- ``decision.recorded``: ``urn:tally:decision:v1``, whose predicate is the decision payload.

Window events name their plan as a second subject, ``plan/<window-id>`` with digest
``{"sha256": <plan_sha256>}``. ``docs/transparency.md`` shows both.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ledger.receipt import TEST_RESULT_PREDICATE, ReceiptKind, ReceiptPolicy, payload_predicate, test_result_predicate

from .catalogue import window_of_stream

if TYPE_CHECKING:
    from ledger.event import Event
    from ledger.store import Ledger

__all__ = ["CONTEXT_LEFT_OUT", "DECISION_PREDICATE", "WINDOW_RECEIPTS", "receipt_context"]

DECISION_PREDICATE = "urn:tally:decision:v1"
_HEX64 = re.compile(r"[0-9a-f]{64}")


def plan_subject(event: Event) -> list[dict[str, Any]]:
    """``plan/<window-id>`` (``plan`` outside a window stream) with the event's ``plan_sha256``."""
    plan = event.payload.get("plan_sha256")
    if not isinstance(plan, str) or not _HEX64.fullmatch(plan):
        return []
    window = window_of_stream(event.stream)
    return [{"name": f"plan/{window}" if window else "plan", "digest": {"sha256": plan}}]


WINDOW_RECEIPTS = ReceiptPolicy(
    kinds={
        "gate.result": ReceiptKind(TEST_RESULT_PREDICATE, test_result_predicate("gate", "verdict", "PASS")),
        "decision.recorded": ReceiptKind(DECISION_PREDICATE, payload_predicate),
    },
    subjects=plan_subject,
)


CONTEXT_LEFT_OUT = ("wave.measured",)
"""Window events a receipt's context leaves out: the decision input carries their figures."""


def receipt_context(ledger: Ledger, event: Event, size: int) -> tuple[bytes, bytes]:
    """A window event's context, proven against the tree of ``size`` (``tally receipt export --window-context``).

    ``<seq>.context.jsonl``: every event of the event's window stream up to it (the
    registration with its plan, the gate results, the admission, the starts, thermal
    events, ...), except :data:`CONTEXT_LEFT_OUT`, one canonical event line each;
    ``<seq>.context-proofs.jsonl``: one inclusion record per line (``ledger.receipt.
    inclusion_record``) against the same checkpoint as the receipt's tlog-proof, so a
    verifier holding the receipt checks each context event offline.
    """
    from ledger.errors import FormatError
    from ledger.receipt import inclusion_proofs, inclusion_record

    if window_of_stream(event.stream) is None:
        raise FormatError(f"seq {event.seq} is not a window event: it has no window context")
    events = [e for e in ledger.events(stream=event.stream, until=event.seq - 1) if e.type not in CONTEXT_LEFT_OUT]
    proofs = inclusion_proofs(ledger, [e.seq for e in events], size)
    lines = "".join(e.line() + "\n" for e in events).encode("utf-8")
    records = "".join(json.dumps(inclusion_record(e.seq, size, proofs[e.seq]), sort_keys=True,
                                 separators=(",", ":")) + "\n" for e in events).encode("utf-8")
    return lines, records
