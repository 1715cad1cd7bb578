"""Checkpoints: signing (never two inconsistent ones), offline verification, rule 8, verify --since."""

from __future__ import annotations

import base64

import pytest

from ledger import checkpoint as cp
from ledger import merkle, note, signing, since
from ledger.errors import FormatError, PolicyError, VerificationError
from ledger.keys import Signer, key_entry
from ledger.store import Ledger
from ledger.verify import verify_events

from .helpers import ORIGIN, fill, rewrite_history, sql


def test_sign_show_and_verify(ledger: Ledger, root: Signer) -> None:
    fill(ledger, root, 9)
    signed = signing.sign_checkpoint(ledger, root)
    assert signed.size == 10 and signed.checkpoint.root == ledger.root(10)
    assert signed.note.startswith(f"{ORIGIN}\n10\n{base64.b64encode(ledger.root(10)).decode()}\n\n\u2014 {ORIGIN} ")
    assert signing.sign_checkpoint(ledger, root) == signed  # same size: the stored one, not a second note
    assert ledger.checkpoint_notes() == [(10, signed.note)]
    vkey = note.vkey(ORIGIN, root.public_raw)
    assert cp.verify_checkpoint(signed.note, [vkey]) == signed.checkpoint
    assert cp.verify_checkpoint(signed.note, [root.public_raw], origin=ORIGIN) == signed.checkpoint
    with pytest.raises(VerificationError, match="origin"):
        cp.verify_checkpoint(signed.note, [vkey], origin="other.example/log")
    with pytest.raises(VerificationError):
        cp.verify_checkpoint(signed.note, [Signer.generate().public_raw])
    older = signing.sign_checkpoint(ledger, root, size=4)  # an older size is fine while consistent
    assert [c.size for c in cp.stored_checkpoints(ledger)] == [4, 10]
    assert cp.checkpoint_covering(ledger, 3) == signed and cp.checkpoint_at(ledger, 4) == older
    with pytest.raises(FormatError):
        signing.sign_checkpoint(ledger, root, size=11)


def test_only_ledger_log_keys_may_sign(ledger: Ledger, root: Signer) -> None:
    stranger = Signer.generate()
    with pytest.raises(PolicyError):
        signing.sign_checkpoint(ledger, stranger)
    witness = Signer.generate("w1")
    ledger.append("ledger", "key.added", key_entry(witness.public_raw, "w1", ["witness"]), root)
    with pytest.raises(PolicyError, match="roles"):
        signing.sign_checkpoint(ledger, witness)
    signer = Signer.generate("op")
    ledger.append("ledger", "key.added", key_entry(signer.public_raw, "op", ["signer"]), root)
    assert signing.sign_checkpoint(ledger, signer).size == 3
    ledger.append("ledger", "key.revoked", {"id": signer.id, "reason": "left"}, root)
    with pytest.raises(PolicyError, match="revoked"):
        signing.sign_checkpoint(ledger, signer)


def test_refuses_a_checkpoint_inconsistent_with_an_earlier_one(ledger: Ledger, root: Signer) -> None:
    fill(ledger, root, 6)
    signing.sign_checkpoint(ledger, root)  # size 7
    fill(ledger, root, 5)
    # an attacker with database access rewrites a stored subtree hash covering the signed prefix
    sql(ledger, "UPDATE merkle_nodes SET hash = :h WHERE level = 2 AND \"index\" = 0", h=b"\x00" * 32)
    with pytest.raises(PolicyError, match="not consistent with the checkpoint this ledger signed at size 7"):
        signing.sign_checkpoint(ledger, root)
    assert [c.size for c in cp.stored_checkpoints(ledger)] == [7]


def test_checks_every_stored_checkpoint(ledger: Ledger, root: Signer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signing, "CONSISTENCY_BATCH", 3)
    for _ in range(8):
        fill(ledger, root, 3)
        signing.sign_checkpoint(ledger, root)
    sizes = [c.size for c in cp.stored_checkpoints(ledger)]
    assert sizes == [4, 7, 10, 13, 16, 19, 22, 25]
    # a forged stored checkpoint in the middle (validly signed, wrong root) is caught
    ledger.store_checkpoint(11, note.sign(cp.Checkpoint(ORIGIN, 11, ledger.root(12)).text(), ORIGIN, root))
    fill(ledger, root, 2)
    with pytest.raises(PolicyError, match="size 11"):
        signing.sign_checkpoint(ledger, root)
    with pytest.raises(PolicyError, match="size 11"):
        signing.sign_checkpoint(ledger, root, size=9)  # an older size is checked against the later ones too


def test_refuses_after_a_rewrite_or_a_truncation(ledger: Ledger, root: Signer) -> None:
    fill(ledger, root, 9)
    signing.sign_checkpoint(ledger, root, size=6)
    rewrite_history(ledger, root, 3, {"forged": True})
    with pytest.raises(VerificationError, match=r"history rewritten: .* size 6"):
        signing.sign_checkpoint(ledger, root)
    sql(ledger, "DELETE FROM events WHERE seq > 4")
    ledger._frontier = None
    with pytest.raises(PolicyError, match="truncated"):
        signing.sign_checkpoint(ledger, root)


def _cosigned(message: str, *witnesses: tuple[str, Signer]) -> str:
    text = note.parse_note(message).text
    return note.with_signatures(message, [note.cosign(text, name, key, 1_700_000_000 + i)
                                          for i, (name, key) in enumerate(witnesses)])


def test_witness_policy_k_of_n(ledger: Ledger, root: Signer) -> None:
    signed = signing.sign_checkpoint(ledger, root)
    a, b, c = Signer.generate(), Signer.generate(), Signer.generate()
    vkeys = [note.vkey(n, k.public_raw, note.SIG_COSIGNATURE) for n, k in (("a.w", a), ("b.w", b), ("c.w", c))]
    two = _cosigned(signed.note, ("a.w", a), ("b.w", b))
    log = [root.public_raw]
    assert len(cp.open_checkpoint(two, log, witnesses=vkeys, threshold=2).witnesses) == 2
    with pytest.raises(VerificationError, match="needs 3"):
        cp.open_checkpoint(two, log, witnesses=vkeys)  # default: every witness given
    with pytest.raises(VerificationError, match="needs 1"):
        cp.open_checkpoint(signed.note, log, witnesses=vkeys[:1], threshold=1)
    with pytest.raises(FormatError):
        cp.open_checkpoint(two, log, witnesses=vkeys, threshold=4)
    with pytest.raises(FormatError):  # a cosigner vkey cannot stand in for the log key
        cp.open_checkpoint(two, vkeys[:1])
    # the same key under two names counts once: as a policy and as cosignatures
    alias = note.vkey("alias.w", a.public_raw, note.SIG_COSIGNATURE)
    aliased = _cosigned(signed.note, ("a.w", a), ("alias.w", a))
    with pytest.raises(FormatError, match="1 witness keys"):
        cp.open_checkpoint(aliased, log, witnesses=[vkeys[0], alias], threshold=2)
    with pytest.raises(VerificationError, match="needs 2"):
        cp.open_checkpoint(aliased, log, witnesses=[vkeys[0], alias, vkeys[1]], threshold=2)
    # a known witness whose cosignature is bad rejects the checkpoint
    forged = note.NoteSignature("c.w", note.key_id("c.w", note.SIG_COSIGNATURE, c.public_raw),
                                (1).to_bytes(8, "big") + c.sign(b"something else"))
    with pytest.raises(VerificationError, match=r"c\.w"):
        cp.open_checkpoint(note.with_signatures(two, [forged]), log, witnesses=vkeys, threshold=2)


# --------------------------------------------------------------------------- rule 8


def test_rule8_accepts_good_checkpoints_and_names_the_failure(ledger: Ledger, root: Signer) -> None:
    fill(ledger, root, 5)
    signed = signing.sign_checkpoint(ledger, root)
    ring = ledger.key_ring()
    good = cp.verify_ledger_checkpoint(signed.note, origin=ORIGIN, keys=ring, root=ledger.root(6), size=6)
    assert good.checkpoint == signed.checkpoint

    def fails(message: str, root_: bytes, size: int, match: str) -> None:
        with pytest.raises(VerificationError, match=match) as info:
            cp.verify_ledger_checkpoint(message, origin=ORIGIN, keys=ring, root=root_, size=size)
        assert (info.value.seq, info.value.rule) == (size, 8)

    fails(signed.note, ledger.root(5), 6, "not the Merkle root")
    fails(signed.note, ledger.root(6), 7, "says size 6")
    wrong_name = note.sign(signed.checkpoint.text(), "someone.else", root)
    fails(wrong_name, ledger.root(6), 6, "not signed by any|no signature")
    stranger = note.sign(signed.checkpoint.text(), ORIGIN, Signer.generate())
    fails(stranger, ledger.root(6), 6, "no signature")
    lying = note.sign(cp.Checkpoint(ORIGIN, 6, ledger.root(5)).text(), ORIGIN, root)
    fails(lying, ledger.root(6), 6, "not the Merkle root")
    with pytest.raises(VerificationError) as info:  # a bundle whose genesis names an impossible origin
        cp.verify_ledger_checkpoint(signed.note, origin="has space", keys=ring, root=ledger.root(6), size=6)
    assert info.value.rule == 8


def test_rule8_key_validity_follows_the_ring(ledger: Ledger, root: Signer) -> None:
    op = Signer.generate("op")
    ledger.append("ledger", "key.added", key_entry(op.public_raw, "op", ["signer"]), root)
    signed = signing.sign_checkpoint(ledger, op)  # size 2
    ledger.append("ledger", "key.revoked", {"id": op.id, "reason": "rotated"}, root)  # seq 3
    ring = ledger.key_ring()
    cp.verify_ledger_checkpoint(signed.note, origin=ORIGIN, keys=ring, root=ledger.root(2), size=2)
    late = note.sign(cp.Checkpoint(ORIGIN, 3, ledger.root(3)).text(), ORIGIN, op)
    with pytest.raises(VerificationError, match="no signature"):
        cp.verify_ledger_checkpoint(late, origin=ORIGIN, keys=ring, root=ledger.root(3), size=3)


def test_rule8_hook_in_the_verification_walk(ledger: Ledger, root: Signer) -> None:
    fill(ledger, root, 4)
    signing.sign_checkpoint(ledger, root)  # 5
    fill(ledger, root, 4)
    signing.sign_checkpoint(ledger, root)  # 9
    notes_by_size = dict(ledger.checkpoint_notes())
    verified = verify_events(ledger.events(), checkpoint_sizes=notes_by_size,
                             on_size=cp.rule8_hook(notes_by_size, ORIGIN))
    assert verified.checkpoints == (5, 9)
    assert verify_events(ledger.events(), checkpoint_sizes=notes_by_size,
                         on_size=cp.rule8_hook(notes_by_size)).checkpoints == (5, 9)
    # a stored checkpoint whose root is not the events' (signed by the real key) fails at its size
    forged = note.sign(cp.Checkpoint(ORIGIN, 7, ledger.root(6)).text(), ORIGIN, root)
    ledger.store_checkpoint(7, forged)
    notes_by_size = dict(ledger.checkpoint_notes())
    with pytest.raises(VerificationError) as info:
        verify_events(ledger.events(), checkpoint_sizes=notes_by_size, on_size=cp.rule8_hook(notes_by_size, ORIGIN))
    assert (info.value.seq, info.value.rule) == (7, 8)


# --------------------------------------------------------------------------- verify --since


def test_since_accepts_an_extension(ledger: Ledger, root: Signer) -> None:
    fill(ledger, root, 6)
    saved = signing.sign_checkpoint(ledger, root).note  # size 7: odd, its last leaf is read from the event
    fill(ledger, root, 10)
    point = since.prove_since(ledger, saved)
    assert (point.size, point.current_size, point.root) == (7, 17, ledger.root(7))
    assert point.head == ledger.get(7).hash and point.frontier.root() == ledger.root(7)
    start = since.since_start(ledger, saved)
    assert (start.size, start.head, start.origin) == (7, point.head, ORIGIN) and root.id in start.keys.keys
    verified = verify_events(ledger.events(7), start=start)
    assert verified.size == 17 and verified.root == ledger.root(17)
    assert since.prove_since(ledger, saved, [note.vkey(ORIGIN, root.public_raw)]).size == 7
    same = since.prove_since(ledger, signing.sign_checkpoint(ledger, root).note)
    assert same.size == same.current_size == 17


def test_since_names_a_truncated_tail(ledger: Ledger, root: Signer) -> None:
    fill(ledger, root, 11)
    saved = signing.sign_checkpoint(ledger, root).note  # 12
    sql(ledger, "DELETE FROM events WHERE seq > 9")
    with pytest.raises(VerificationError, match="truncated") as info:
        since.prove_since(ledger, saved)
    assert (info.value.seq, info.value.rule) == (10, 8)


@pytest.mark.parametrize("seq", [2, 8, 12])
def test_since_names_rewritten_history(ledger: Ledger, root: Signer, seq: int) -> None:
    fill(ledger, root, 11)
    saved = signing.sign_checkpoint(ledger, root).note  # 12
    fill(ledger, root, 3)
    rewrite_history(ledger, root, seq, {"forged": seq})  # re-hashed, re-chained, re-signed, new tree
    with pytest.raises(VerificationError, match="rewritten") as info:
        since.prove_since(ledger, saved)
    assert info.value.rule == 8


@pytest.mark.parametrize("size", [11, 12])
def test_since_names_a_rewritten_boundary_event_without_a_new_tree(ledger: Ledger, root: Signer, size: int) -> None:
    fill(ledger, root, 14)
    saved = signing.sign_checkpoint(ledger, root, size=size).note
    rewrite_history(ledger, root, size, {"forged": True}, tree=False)
    with pytest.raises(VerificationError, match="rewritten"):
        since.since_start(ledger, saved)


def test_since_names_a_truncated_then_regrown_ledger(ledger: Ledger, root: Signer) -> None:
    fill(ledger, root, 9)
    saved = signing.sign_checkpoint(ledger, root).note  # 10
    sql(ledger, "DELETE FROM events WHERE seq > 5")
    sql(ledger, "DELETE FROM merkle_nodes")
    ledger._frontier = None
    rewrite_history(ledger, root, 5, {"forged": True})  # rebuilds the tree of the 5 that are left
    fill(ledger, root, 10)
    with pytest.raises(VerificationError, match="rewritten"):
        since.prove_since(ledger, saved)


def test_since_refuses_a_foreign_or_unsigned_checkpoint(ledger: Ledger, root: Signer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fill(ledger, root, 3)
    real = signing.sign_checkpoint(ledger, root)
    forged = note.sign(real.checkpoint.text(), ORIGIN, Signer.generate())
    with pytest.raises(VerificationError):
        since.prove_since(ledger, forged)
    other = note.sign(cp.Checkpoint("other.example/log", 4, real.checkpoint.root).text(), "other.example/log", root)
    with pytest.raises(VerificationError, match=r"other\.example"):
        since.prove_since(ledger, other)
    with pytest.raises(FormatError):
        since.prove_since(ledger, "not a note")
    path = tmp_path / "saved.txt"
    path.write_text(real.note)
    assert since.since_start(ledger, path).size == 4
    lying = note.sign(cp.Checkpoint(ORIGIN, 4, merkle.EMPTY_ROOT).text(), ORIGIN, root)
    with pytest.raises(VerificationError, match="rewritten"):
        since.prove_since(ledger, lying)


def test_consistency_proof_files_roundtrip(ledger: Ledger, root: Signer) -> None:
    fill(ledger, root, 12)
    signed = signing.sign_checkpoint(ledger, root)
    proof = cp.consistency_proof(ledger, 5, 13)
    assert proof.checkpoint == signed.note and proof.new == 13
    merkle.verify_consistency(5, 13, ledger.root(5), signed.checkpoint.root, list(proof.hashes))
    parsed = cp.parse_consistency_proof(proof.text())
    assert (parsed.old, parsed.hashes, parsed.new, parsed.checkpoint) == (5, proof.hashes, 13, signed.note)
    import json

    again = cp.parse_consistency_proof(json.dumps(proof.to_json()))
    assert (again.old, again.new, again.hashes, again.old_root) == (5, 13, proof.hashes, ledger.root(5))
    bare = cp.parse_consistency_proof(cp.ConsistencyProof(5, proof.hashes).text())
    assert bare.checkpoint is None and bare.new is None
    for bad in ("", "old x\n\n", "new 3\n\n", "old 3\nnot base64!\n\n", '{"old": "3"}'):
        with pytest.raises(FormatError):
            cp.parse_consistency_proof(bad)
    with pytest.raises(FormatError):
        cp.consistency_proof(ledger, 0, 5)
    with pytest.raises(FormatError):
        cp.consistency_proof(ledger, 5, 14)


@pytest.mark.parametrize("text", [
    "origin\n5\n",
    "origin\n05\n" + base64.b64encode(b"\x00" * 32).decode() + "\n",
    "origin\n-1\n" + base64.b64encode(b"\x00" * 32).decode() + "\n",
    "origin\n5\n" + base64.b64encode(b"\x00" * 31).decode() + "\n",
    "\n5\n" + base64.b64encode(b"\x00" * 32).decode() + "\n",
    "origin\n5\n" + base64.b64encode(b"\x00" * 32).decode() + "\n\n",
    "origin\n5\n" + base64.b64encode(b"\x00" * 32).decode(),
])
def test_malformed_checkpoint_text(text: str) -> None:
    with pytest.raises(FormatError):
        cp.parse_checkpoint(text)


def test_checkpoint_text_with_extensions_roundtrips() -> None:
    body = cp.Checkpoint("o.example", 0, merkle.EMPTY_ROOT, ("ext one",))
    assert cp.parse_checkpoint(body.text()) == body


def test_proofs_checkpoints_and_since_on_every_backend(any_url: str, root: Signer) -> None:
    """The storage contract for this layer: SQLite (memory, file) and a real PostgreSQL."""
    from .helpers import MemoryTree

    book = Ledger(any_url)
    book.init(ORIGIN, root)
    fill(book, root, 40, batch=13)
    saved = signing.sign_checkpoint(book, root).note  # 41
    fill(book, root, 22)
    tree = MemoryTree([merkle.hash_leaf(e.raw_hash) for e in book.events()])
    assert book.root(63) == tree.root(63) and book.root(41) == tree.root(41)
    assert [book.inclusion_proof(i, 63) for i in (0, 40, 62)] == [merkle.inclusion_proof(i, 63, tree.fetch)
                                                                  for i in (0, 40, 62)]
    assert book.consistency_proof(41, 63) == merkle.consistency_proof(41, 63, tree.fetch)
    assert signing.sign_checkpoint(book, root).size == 63
    start = since.since_start(book, saved)
    assert verify_events(book.events(start.size), start=start).size == 63
    book.close()
