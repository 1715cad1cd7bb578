"""The witness: cosigns consistent checkpoints, refuses rollbacks and forks, keeps its state atomically."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledger import checkpoint as cp
from ledger import note, signing
from ledger.errors import FormatError, PolicyError, VerificationError
from ledger.keys import Signer
from ledger.store import Ledger
from ledger.witness import Witness, state_dir_name

from .helpers import ORIGIN, fill


@pytest.fixture
def witness(tmp_path: Path) -> Witness:
    return Witness(tmp_path / "wstate", "witness.example/w1", Signer.generate())


def _vkey(root: Signer) -> str:
    return note.vkey(ORIGIN, root.public_raw)


def test_cosigns_a_first_then_a_consistent_checkpoint(ledger: Ledger, root: Signer, witness: Witness) -> None:
    fill(ledger, root, 4)
    first = signing.sign_checkpoint(ledger, root)
    result = witness.cosign(first.note, [_vkey(root)], None, now=1_700_000_000)
    assert result.old_size == 0 and result.note.startswith(first.note)
    assert result.line.startswith("\u2014 witness.example/w1 ")
    verified = cp.open_checkpoint(result.note, [root.public_raw], witnesses=[witness.vkey()])
    assert [(w.verifier.name, w.timestamp) for w in verified.witnesses] == [("witness.example/w1", 1_700_000_000)]
    fill(ledger, root, 6)
    second = signing.sign_checkpoint(ledger, root)
    proof = cp.parse_consistency_proof(cp.consistency_proof(ledger, 5, 11).text())
    again = witness.cosign(second.note, [], proof, now=1_700_000_100)  # the log key is remembered
    assert again.old_size == 5
    state = witness.state(ORIGIN)
    assert state is not None and state.checkpoint == second.checkpoint and state.note == again.note
    directory = witness.root / state_dir_name(ORIGIN)
    assert (directory / "origin").read_text() == ORIGIN + "\n"
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]
    # the same checkpoint again is fine (a fresh timestamp), with an empty proof
    assert witness.cosign(second.note, [], None, now=1_700_000_200).old_size == 11


def test_refuses_a_rollback(ledger: Ledger, root: Signer, witness: Witness) -> None:
    fill(ledger, root, 4)
    small = signing.sign_checkpoint(ledger, root)
    fill(ledger, root, 4)
    big = signing.sign_checkpoint(ledger, root)
    witness.cosign(big.note, [_vkey(root)], None, now=1)
    with pytest.raises(VerificationError, match="rollback"):
        witness.cosign(small.note, [_vkey(root)], None, now=2)
    state = witness.state(ORIGIN)
    assert state is not None and state.checkpoint.size == 9


def test_refuses_a_fork(tmp_path: Path, root: Signer, witness: Witness) -> None:
    """Two ledgers under one origin and key: the witness sees one, then is shown the other."""
    books = []
    for name in ("a", "b"):
        book = Ledger(f"sqlite:///{tmp_path / name}.db")
        book.init(ORIGIN, root)
        fill(book, root, 4)
        books.append(book)
    a, b = books
    witness.cosign(signing.sign_checkpoint(a, root).note, [_vkey(root)], None, now=1)  # size 5 of a
    same_size = signing.sign_checkpoint(b, root)
    with pytest.raises(VerificationError, match="fork"):
        witness.cosign(same_size.note, [], None, now=2)
    fill(b, root, 3)
    larger = signing.sign_checkpoint(b, root)
    proof = cp.parse_consistency_proof(cp.consistency_proof(b, 5, 8).text())  # b's own proof: not from a's root
    with pytest.raises(VerificationError, match="fork"):
        witness.cosign(larger.note, [], proof, now=3)
    state = witness.state(ORIGIN)
    assert state is not None and state.checkpoint.root == a.root(5)


def test_needs_the_right_proof(ledger: Ledger, root: Signer, witness: Witness) -> None:
    fill(ledger, root, 4)
    witness.cosign(signing.sign_checkpoint(ledger, root).note, [_vkey(root)], None, now=1)  # 5
    fill(ledger, root, 5)
    newer = signing.sign_checkpoint(ledger, root)  # 10
    with pytest.raises(PolicyError, match="from size 5"):
        witness.cosign(newer.note, [], None, now=2)
    with pytest.raises(PolicyError, match="witness is at size 5"):
        witness.cosign(newer.note, [], cp.consistency_proof(ledger, 3, 10), now=2)
    with pytest.raises(FormatError, match="to size 9"):
        witness.cosign(newer.note, [], cp.consistency_proof(ledger, 5, 9), now=2)
    assert witness.cosign(newer.note, [], cp.consistency_proof(ledger, 5, 10), now=2).old_size == 5


def test_refuses_a_bad_log_signature_and_unknown_logs(ledger: Ledger, root: Signer, witness: Witness) -> None:
    signed = signing.sign_checkpoint(ledger, root)
    with pytest.raises(FormatError, match="no log key"):
        witness.cosign(signed.note, [], None, now=1)
    impostor = note.sign(signed.checkpoint.text(), ORIGIN, Signer.generate())
    with pytest.raises(VerificationError):
        witness.cosign(impostor, [_vkey(root)], None, now=1)
    tampered = signed.note.replace(f"\n{signed.size}\n", f"\n{signed.size + 1}\n")
    with pytest.raises(VerificationError):
        witness.cosign(tampered, [_vkey(root)], None, now=1)
    assert witness.state(ORIGIN) is None
    with pytest.raises(PolicyError, match="old 0"):
        witness.cosign(signed.note, [_vkey(root)], cp.ConsistencyProof(3, ()), now=1)


def test_state_is_replaced_atomically(ledger: Ledger, root: Signer, witness: Witness, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fill(ledger, root, 2)
    first = witness.cosign(signing.sign_checkpoint(ledger, root).note, [_vkey(root)], None, now=1)
    fill(ledger, root, 2)
    newer = signing.sign_checkpoint(ledger, root)

    def crash(src: object, dst: object, **_dir_fds: object) -> None:
        raise OSError(5, "simulated crash before the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(FormatError, match=r"cannot write witness state .*simulated crash before the rename"):
        witness.cosign(newer.note, [], cp.consistency_proof(ledger, 3, 5), now=2)
    monkeypatch.undo()
    state = witness.state(ORIGIN)
    assert state is not None and state.note == first.note  # the old state, whole


def test_a_second_witness_and_a_k_of_n_policy(ledger: Ledger, root: Signer, tmp_path: Path) -> None:
    w1 = Witness(tmp_path / "w1", "w1.example", Signer.generate())
    w2 = Witness(tmp_path / "w2", "w2.example", Signer.generate())
    signed = signing.sign_checkpoint(ledger, root)
    once = w1.cosign(signed.note, [_vkey(root)], None, now=10).note
    twice = w2.cosign(once, [_vkey(root)], None, now=11).note
    assert twice.count("\u2014 ") == 3
    both = [w1.vkey(), w2.vkey()]
    assert len(cp.open_checkpoint(twice, [_vkey(root)], witnesses=both).witnesses) == 2
    with pytest.raises(VerificationError, match="needs 2"):
        cp.open_checkpoint(once, [_vkey(root)], witnesses=both)
    assert cp.open_checkpoint(once, [_vkey(root)], witnesses=both, threshold=1).witnesses[0].verifier.name == "w1.example"
    assert w2.state(ORIGIN) is not None and w2.state(ORIGIN).note == twice  # type: ignore[union-attr]


def test_bad_witness_name(tmp_path: Path) -> None:
    with pytest.raises(FormatError):
        Witness(tmp_path, "has space", Signer.generate())
