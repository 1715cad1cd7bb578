"""The one error tree of tally.

::

    TallyError
    ├── FormatError            bad input: parse, decode, schema, usage      -> exit 2
    │   └── PayloadError       an event payload breaks the rules of SPEC 3.1
    ├── IntegrityError         a check of recorded data failed              -> exit 1
    │   └── VerificationError  hash, signature, chain, proof; carries seq + rule
    ├── PolicyError            gate not passed, plan mismatch, refusal       -> exit 1
    ├── StorageError           the database misbehaved                      -> exit 1
    └── ExternalError          a host or server did not answer (retry)      -> exit 3

The CLI maps this tree to exit codes in one place (``cli/errors.py``); library code
raises, it never prints or exits.
"""

from __future__ import annotations

__all__ = [
    "ExternalError",
    "FormatError",
    "IntegrityError",
    "PayloadError",
    "PolicyError",
    "StorageError",
    "TallyError",
    "VerificationError",
]


class TallyError(Exception):
    """Root of every error tally raises on purpose."""


class FormatError(TallyError):
    """Input that cannot be accepted as given: a malformed file, field or argument."""


class PayloadError(FormatError):
    """An event payload that breaks the payload rules; the message names the path."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class IntegrityError(TallyError):
    """Recorded data failed a check (hash, signature, chain, proof, digest)."""


class VerificationError(IntegrityError):
    """A ledger verification rule failed at a given event.

    ``seq`` is the first failing event (``None`` when the failure is not tied to one
    event, e.g. a checkpoint file), ``rule`` the rule number of SPEC 3.3 (or a short
    name for bundle and protocol checks).
    """

    def __init__(self, message: str, *, seq: int | None = None, rule: int | str | None = None):
        super().__init__(message)
        self.seq = seq
        self.rule = rule

    def __str__(self) -> str:
        where = []
        if self.seq is not None:
            where.append(f"seq {self.seq}")
        if self.rule is not None:
            where.append(f"rule {self.rule}")
        prefix = f"{', '.join(where)}: " if where else ""
        return prefix + super().__str__()


class PolicyError(TallyError):
    """A refusal: a gate has not passed, a plan does not match, a protocol rule forbids it."""


class StorageError(TallyError):
    """The database failed or holds something tally did not write."""


class ExternalError(TallyError):
    """Something outside (a host, a server, a command) did not answer; retrying may help."""
