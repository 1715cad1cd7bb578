"""tally's receipt policy: which window events have receipts, and what their Statements say.

- ``gate.result``: the in-toto test-result predicate (``result`` PASSED/FAILED, the gate
  as the test, the plan as its configuration);
- ``decision.recorded``: ``urn:tally:decision:v1``, whose predicate is the decision payload.

Window events name their plan as a second subject, ``plan/<window-id>`` with digest
``{"sha256": <plan_sha256>}``. ``docs/transparency.md`` shows both.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ledger.receipt import TEST_RESULT_PREDICATE, ReceiptKind, ReceiptPolicy, payload_predicate, test_result_predicate

from .catalogue import window_of_stream

if TYPE_CHECKING:
    from ledger.event import Event

__all__ = ["DECISION_PREDICATE", "WINDOW_RECEIPTS"]

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
