"""The promotion gate: is a decision receipt enough to promote the candidate? (offline, ``docs/promotion.md``)

::

    from runner.promotion import check_promotion, read_policy

    policy = read_policy(Path("policy.toml").read_bytes(), "policy.toml")
    result = check_promotion(files, policy, bundle)  # files: a ReceiptFiles; bundle: a verified full export
    result.verdict                              # "PROMOTABLE" or "NOT_PROMOTABLE", every check with its detail

- ``policy``: the promotion policy (TOML, bounded, every refusal naming the member);
- ``check``: the receipt verified, its window context, then every condition of the policy;
- ``looks``: the candidate's looks counted in the presented ledger, the registered budget.
"""

from __future__ import annotations

from .check import Check, PromotionResult, ReceiptFiles, check_promotion
from .looks import POLICY_EVENT, POLICY_STREAM, Candidate, Look, candidate_of, count_looks, registration_payload
from .policy import MAX_POLICY_BYTES, PromotionPolicy, read_policy

__all__ = [
    "MAX_POLICY_BYTES",
    "POLICY_EVENT",
    "POLICY_STREAM",
    "Candidate",
    "Check",
    "Look",
    "PromotionPolicy",
    "PromotionResult",
    "ReceiptFiles",
    "candidate_of",
    "check_promotion",
    "count_looks",
    "read_policy",
    "registration_payload",
]
