"""inputs_digest: SHA-256 over the raw 32-byte hashes of the measurement events, in seq order."""

from __future__ import annotations

import hashlib

import pytest

from ledger.errors import FormatError
from ledger.keys import Signer
from ledger.store import Ledger
from runner.decide import compute, inputs_digest

from .builders import Rep, same, win2_input


def test_empty_list_is_the_digest_of_nothing() -> None:
    assert inputs_digest([]) == hashlib.sha256(b"").hexdigest()


def test_known_vector() -> None:
    a, b = "00" * 32, "ff" * 32
    assert inputs_digest([a, b]) == hashlib.sha256(b"\x00" * 32 + b"\xff" * 32).hexdigest()
    assert inputs_digest([b, a]) != inputs_digest([a, b])  # order matters: seq order is part of the digest


@pytest.mark.parametrize(("hashes", "message"), [
    (["AB" * 32], r"^hashes\[0\]: expected 64 lowercase hex"),
    (["00" * 32, "0" * 63], r"^hashes\[1\]: expected 64 lowercase hex"),
    ([b"\x00" * 32], r"^hashes\[0\]: expected 64 lowercase hex"),
    ("00" * 32, r"^hashes: expected a list"),
])
def test_bad_hashes_are_refused(hashes: object, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        inputs_digest(hashes)  # type: ignore[arg-type]


def test_digest_of_recorded_wave_events(ledger: Ledger, root: Signer) -> None:
    """The events appended to a window stream; the digest is over their stored hashes in seq order."""
    data = win2_input({"short-b1": {"s1": same(Rep()), "s2": same(Rep()), "s3": same(Rep())}})
    events = [ledger.append("window/w1", "wave.measured", {"window": "w1", **wave}, root) for wave in data["waves"]]
    ledger.append("window/w1", "measurement.ended", {"window": "w1"}, root)
    read = [e for e in ledger.events(stream="window/w1", types=["wave.measured"])]
    assert [e.seq for e in read] == sorted(e.seq for e in events)
    digest = inputs_digest([e.hash for e in read])
    assert digest == hashlib.sha256(b"".join(bytes.fromhex(e.hash) for e in events)).hexdigest()
    # the waves read back from the ledger decide exactly as the input they came from
    waves = [{k: v for k, v in e.payload.items() if k != "window"} for e in read]
    assert compute({**data, "waves": waves}) == compute(data)
