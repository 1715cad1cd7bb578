"""Tampering with the stored ledger, one attack per test, each caught at the right seq and rule."""

from __future__ import annotations

import pytest

from ledger.errors import VerificationError
from ledger.keys import Signer, key_entry
from ledger.store import Ledger
from ledger.stored import verify_ledger

from .helpers import forge_row, insert_row, sql


@pytest.fixture
def book(ledger: Ledger, root: Signer) -> Ledger:
    """Genesis + 9 events over two streams."""
    for i in range(9):
        ledger.append("window/w1" if i % 2 else "notes", "note.added", {"i": i, "text": f"n{i}"}, root)
    return ledger


def caught(book: Ledger) -> tuple[int | None, int | str | None]:
    with pytest.raises(VerificationError) as info:
        verify_ledger(book)
    return info.value.seq, info.value.rule


def test_clean_ledger_verifies(book: Ledger) -> None:
    report = verify_ledger(book)
    assert report.verified.size == 10


@pytest.mark.parametrize(
    ("attack", "statement", "rule"),
    [
        ("payload_edited", "UPDATE events SET payload = replace(payload, 'n3', 'n9') WHERE seq = 5", 4),
        ("type_changed", "UPDATE events SET type = 'note.removed' WHERE seq = 5", 4),
        ("stream_moved", "UPDATE events SET stream = 'elsewhere' WHERE seq = 5", 4),
        ("time_backdated", "UPDATE events SET time = '2020-01-01T00:00:00.000000Z' WHERE seq = 5", 4),
        ("prev_relinked", "UPDATE events SET prev = (SELECT hash FROM events WHERE seq = 2) WHERE seq = 5", 2),
        ("hash_replaced", "UPDATE events SET hash = '" + "ab" * 32 + "' WHERE seq = 5", 4),
        ("sig_swapped", "UPDATE events SET sig = (SELECT sig FROM events WHERE seq = 4) WHERE seq = 5", 6),
        ("seq_renumbered", "UPDATE events SET seq = 500 WHERE seq = 5", 1),
        ("middle_event_deleted", "DELETE FROM events WHERE seq = 5", 1),
    ],
)
def test_direct_sql_change_is_caught(book: Ledger, attack: str, statement: str, rule: int) -> None:
    sql(book, statement)
    assert caught(book) == (5, rule), attack


def test_actor_replaced_by_other_known_key(book: Ledger, root: Signer) -> None:
    other = Signer.generate("op")
    book.append("ledger", "key.added", key_entry(other.public_raw, "op", ["signer"]), root)
    sql(book, "UPDATE events SET actor = :actor WHERE seq = 5", actor=other.id)
    assert caught(book) == (5, 4)


def test_swapped_events(book: Ledger) -> None:
    sql(book, "UPDATE events SET seq = -1 WHERE seq = 5")
    sql(book, "UPDATE events SET seq = 5 WHERE seq = 6")
    sql(book, "UPDATE events SET seq = 6 WHERE seq = -1")
    assert caught(book) == (5, 2)


def test_revoked_key_signs(book: Ledger, root: Signer) -> None:
    op = Signer.generate("op")
    book.append("ledger", "key.added", key_entry(op.public_raw, "op", ["signer"]), root)
    book.append("notes", "note.added", {"by": "op"}, op)  # fine while active
    book.append("ledger", "key.revoked", {"id": op.id, "reason": "laptop lost"}, root)
    row = forge_row(book, op, "notes", "note.added", {"by": "op after revocation"})
    insert_row(book, row)
    assert caught(book) == (row["seq"], 5)


def test_unknown_key_signs(book: Ledger) -> None:
    stranger = Signer.generate("stranger")
    row = forge_row(book, stranger, "notes", "note.added", {"by": "stranger"})
    insert_row(book, row)
    assert caught(book) == (row["seq"], 5)


def test_key_event_signed_by_non_root_key(book: Ledger, root: Signer) -> None:
    op = Signer.generate("op")
    book.append("ledger", "key.added", key_entry(op.public_raw, "op", ["signer"]), root)
    mallory = Signer.generate("mallory")
    row = forge_row(book, op, "ledger", "key.added", key_entry(mallory.public_raw, "mallory", ["root"]))
    insert_row(book, row)
    assert caught(book) == (row["seq"], 7)


def test_pinned_root_key_must_be_named_by_genesis(book: Ledger, root: Signer) -> None:
    assert verify_ledger(book, root_key=root.id).verified.size == 10
    with pytest.raises(VerificationError) as info:
        verify_ledger(book, root_key=Signer.generate().id)
    assert (info.value.seq, info.value.rule) == (1, 9)


def test_first_failure_is_reported_with_parallel_signature_checks(book: Ledger) -> None:
    sql(book, "UPDATE events SET sig = (SELECT sig FROM events WHERE seq = 2) WHERE seq = 3")
    sql(book, "UPDATE events SET type = 'x.y' WHERE seq = 8")
    with pytest.raises(VerificationError) as info:
        verify_ledger(book, jobs=2)
    assert (info.value.seq, info.value.rule) == (3, 6)


def test_library_refuses_revoked_and_unknown_signers(book: Ledger, root: Signer) -> None:
    from ledger.errors import PolicyError

    with pytest.raises(PolicyError, match="not known"):
        book.append("notes", "note.added", {}, Signer.generate())
    op = Signer.generate("op")
    book.append("ledger", "key.added", key_entry(op.public_raw, "op", ["signer"]), root)
    with pytest.raises(PolicyError, match="root"):
        book.append("ledger", "key.revoked", {"id": root.id, "reason": "coup"}, op)
    book.append("ledger", "key.revoked", {"id": op.id, "reason": "rotated"}, root)
    with pytest.raises(PolicyError, match="revoked"):
        book.append("notes", "note.added", {}, op)
    assert verify_ledger(book).verified.size == 12
