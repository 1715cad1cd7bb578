"""Keys have roles in verification too: a witness-only key's event is refused wherever it is checked.

The store refuses appends signed by a ``--role witness`` key; an attacker with database
access signs the body directly (``helpers.forge_row``) and inserts the row. Rule 5 then
fails that event, naming its seq, in ``verify``, in the trusted paths that sign
(checkpoint, receipt export) and in the bundle audit. ``tally 0.x`` before this rule
checkpointed such events, gave them PASSED receipts and passed their bundles: the
``old_tally`` fixture plays that version (no role check) to produce those artefacts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.app import app
from ledger import receipt as rc
from ledger.bundle import export_bundle, verify_bundle
from ledger.errors import PolicyError, VerificationError
from ledger.keys import KeyInfo, Signer, key_entry
from ledger.signing import sign_checkpoint
from ledger.store import Ledger
from ledger.stored import verify_ledger
from runner.events.receipts import WINDOW_RECEIPTS

from .helpers import forge_row, insert_event
from .independent_checker import CheckFailed, check_events_jsonl

PLAN = hashlib.sha256(b"plan").hexdigest()
GATE = {"gate": "rng", "verdict": "PASS", "evidence": {}, "plan_sha256": PLAN}
runner = CliRunner()


@contextmanager
def old_tally(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Verification as it was before keys had roles in it: every known key signs events."""
    with monkeypatch.context() as patch:
        patch.setattr(KeyInfo, "signs_events", property(lambda _self: True))
        yield


@pytest.fixture
def witness() -> Signer:
    return Signer.generate("w1")


@pytest.fixture
def book(ledger: Ledger, root: Signer, witness: Signer) -> Ledger:
    """A ledger with a witness-only key, a few root-signed events and a stored checkpoint."""
    ledger.append("ledger", "key.added", key_entry(witness.public_raw, "w1", ["witness"]), root)
    for i in range(3):
        ledger.append("notes", "note.added", {"i": i}, root)
    sign_checkpoint(ledger, root)
    return ledger


def forge_gate(book: Ledger, witness: Signer) -> int:
    """A PASS gate result signed by the witness key, written as an attacker with DB access would."""
    row = forge_row(book, witness, "window/w1", "gate.result", GATE)
    insert_event(book, row)
    return int(row["seq"])


def test_store_refuses_a_witness_key(book: Ledger, witness: Signer) -> None:
    with pytest.raises(PolicyError, match="appending needs root or signer"):
        book.append("notes", "note.added", {"by": "witness"}, witness)


def test_witness_role_key_signs_fails_verify_with_seq_and_rule(book: Ledger, witness: Signer) -> None:
    seq = forge_gate(book, witness)
    with pytest.raises(VerificationError) as info:
        verify_ledger(book)
    assert (info.value.seq, info.value.rule) == (seq, 5)
    assert "roles ['witness']" in str(info.value)


def test_witness_role_key_signs_fails_tally_verify(book: Ledger, witness: Signer, tmp_path: Path) -> None:
    seq = forge_gate(book, witness)
    result = runner.invoke(app, ["--db", str(tmp_path / "tally.db"), "verify"])
    assert result.exit_code == 1
    assert f"seq {seq}" in result.stderr and "rule 5" in result.stderr


def test_a_key_with_the_witness_and_signer_roles_signs(book: Ledger, root: Signer) -> None:
    both = Signer.generate("both")
    book.append("ledger", "key.added", key_entry(both.public_raw, "both", ["witness", "signer"]), root)
    book.append("notes", "note.added", {"by": "both"}, both)
    assert verify_ledger(book).verified.size == book.size()


def test_witness_role_key_signs_gets_no_checkpoint(book: Ledger, root: Signer, witness: Signer) -> None:
    seq = forge_gate(book, witness)  # after the stored checkpoint: the suffix the signer re-verifies
    with pytest.raises(VerificationError) as info:
        sign_checkpoint(book, root)
    assert (info.value.seq, info.value.rule) == (seq, 5)
    assert book.checkpoint_notes()[-1][0] == seq - 1  # nothing new stored


def test_witness_role_key_signs_without_a_stored_checkpoint(ledger: Ledger, root: Signer, witness: Signer) -> None:
    ledger.append("ledger", "key.added", key_entry(witness.public_raw, "w1", ["witness"]), root)
    seq = forge_gate(ledger, witness)  # the whole ledger is re-verified from the genesis
    with pytest.raises(VerificationError) as info:
        sign_checkpoint(ledger, root)
    assert (info.value.seq, info.value.rule) == (seq, 5)


def test_witness_role_key_signs_gets_no_receipt(book: Ledger, root: Signer, witness: Signer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seq = forge_gate(book, witness)
    with old_tally(monkeypatch):  # the old tally checkpointed it and gave it a PASSED receipt
        sign_checkpoint(book, root)
        old = rc.build_receipt(book, seq, root, WINDOW_RECEIPTS)
        assert rc.statement_for(old.event, book.info.origin, WINDOW_RECEIPTS)["predicate"]["result"] == "PASSED"
    # Now the checkpoint at the event's size anchors the tree, so only the event's own re-check can refuse it.
    with pytest.raises(VerificationError) as info:
        rc.build_receipt(book, seq, root, WINDOW_RECEIPTS)
    assert (info.value.seq, info.value.rule) == (seq, 5)


@pytest.mark.parametrize("stream", [None, "window/w1"], ids=["full", "partial"])
def test_witness_role_key_signs_fails_the_bundle_audit(book: Ledger, root: Signer, witness: Signer,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       stream: str | None) -> None:
    seq = forge_gate(book, witness)
    bundle = tmp_path / "bundle"
    with old_tally(monkeypatch):  # a bundle the old tally exported (and audited as PASS)
        export_bundle(book, bundle, stream=stream, signer=root)
        verify_bundle(bundle, root_key=root.id)
    with pytest.raises(VerificationError) as info:
        verify_bundle(bundle, root_key=root.id)
    assert (info.value.seq, info.value.rule) == (seq, 5)
    if stream is None:  # a verifier written from docs/format.md alone agrees
        with pytest.raises(CheckFailed) as independent:
            check_events_jsonl(bundle / "events.jsonl")
        assert (independent.value.seq, independent.value.rule) == (seq, 5)
    result = runner.invoke(app, ["audit", str(bundle), "--root-key", root.id])
    assert result.exit_code == 1
    assert f"seq {seq}" in result.stderr and "rule 5" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
