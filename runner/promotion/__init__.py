"""The promotion gate: is a decision receipt enough to promote the candidate? (offline, ``docs/promotion.md``)

::

    from runner.promotion import check_promotion, read_policy

    policy = read_policy(Path("policy.toml").read_bytes(), "policy.toml")
    result = check_promotion(files, policy)     # files: a ReceiptFiles read from an exported receipt
    result.verdict                              # "PROMOTABLE" or "NOT_PROMOTABLE", every check with its detail

- ``policy``: the promotion policy (TOML, bounded, every refusal naming the member);
- ``check``: the receipt verified, its window context, then every condition of the policy.
"""

from __future__ import annotations

from .check import Check, PromotionResult, ReceiptFiles, check_promotion
from .policy import MAX_POLICY_BYTES, PromotionPolicy, read_policy

__all__ = [
    "MAX_POLICY_BYTES",
    "Check",
    "PromotionPolicy",
    "PromotionResult",
    "ReceiptFiles",
    "check_promotion",
    "read_policy",
]
