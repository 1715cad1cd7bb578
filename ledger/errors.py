"""The one error tree of tally.

::

    TallyError
    ├── FormatError            bad input: parse, decode, schema, usage      -> exit 2
    │   └── FieldError         one member of a document, named by its path
    │       └── PayloadError   an event payload breaks the payload rules
    ├── IntegrityError         a check of recorded data failed              -> exit 1
    │   └── VerificationError  hash, signature, chain, proof; carries seq + rule
    ├── PolicyError            gate not passed, plan mismatch, refusal       -> exit 1
    ├── StorageError           the database misbehaved                      -> exit 1
    └── ExternalError          a host or server did not answer (retry)      -> exit 3

The CLI maps this tree to exit codes in one place (``cli/common.py``, ``exit_code``);
library code raises, it never prints or exits.
"""

from __future__ import annotations

__all__ = [
    "ExternalError",
    "FieldError",
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


class FieldError(FormatError):
    """A document member that is missing, mistyped or out of range; ``path`` names it.

    The message is ``path: problem`` (``plan.cells[1].context: expected one of ...``),
    preceded by ``source: `` when the document has a name of its own (a site file).
    """

    def __init__(self, path: str, problem: str, *, source: str | None = None) -> None:
        text = f"{path}: {problem}" if path else problem
        super().__init__(f"{source}: {text}" if source else text)
        self.path = path
        self.problem = problem
        self.source = source

    def under(self, prefix: str) -> FieldError:
        """The same error one level up: ``prefix`` + this path (``.key`` and ``[i]`` join as written)."""
        if not self.path:
            path = prefix
        elif self.path.startswith(("[", ".")) or not prefix:
            path = prefix + self.path
        else:
            path = f"{prefix}.{self.path}"
        return type(self)(path, self.problem, source=self.source)


class PayloadError(FieldError):
    """An event payload that breaks the payload rules; the message names the path."""


class IntegrityError(TallyError):
    """Recorded data failed a check (hash, signature, chain, proof, digest)."""


class VerificationError(IntegrityError):
    """A ledger verification rule failed at a given event.

    ``seq`` is the first failing event (``None`` when the failure is not tied to one
    event, e.g. a checkpoint file), ``rule`` the rule number of ``docs/format.md`` (or a short
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
