"""Property tests: for random trees of 1..300 leaves every proof verifies and any flipped bit fails."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import merkle
from ledger.errors import VerificationError
from ledger.keys import Signer
from ledger.store import Ledger

from .helpers import MemoryTree, fill, flip_bit


def _leaves(size: int, seed: int) -> list[bytes]:
    return [merkle.hash_leaf(hashlib.sha256(f"{seed}/{i}".encode()).digest()) for i in range(size)]


def _fails(check: object) -> bool:
    try:
        check()  # type: ignore[operator]
    except VerificationError:
        return True
    return False


@given(size=st.integers(1, 300), seed=st.integers(0, 2**32), data=st.data())
def test_every_inclusion_proof_verifies_and_a_flipped_bit_fails(size: int, seed: int, data: st.DataObject) -> None:
    leaves = _leaves(size, seed)
    tree = MemoryTree(leaves)
    root = tree.root(size)
    assert merkle.root_of_size(size, tree.fetch) == root == merkle.root_from_leaves(leaves)
    proofs = merkle.inclusion_proofs(list(range(size)), size, tree.fetch)
    for index, proof in enumerate(proofs):
        merkle.verify_inclusion(index, size, leaves[index], proof, root)
    index = data.draw(st.integers(0, size - 1), label="index")
    proof = proofs[index]
    assert proof == merkle.inclusion_proof(index, size, tree.fetch)
    # a flipped bit anywhere: the leaf, the root, or any proof hash
    bit = data.draw(st.integers(0, 255), label="bit")
    assert _fails(lambda: merkle.verify_inclusion(index, size, flip_bit(leaves[index], bit), proof, root))
    assert _fails(lambda: merkle.verify_inclusion(index, size, leaves[index], proof, flip_bit(root, bit)))
    for position in range(len(proof)):
        bad = list(proof)
        bad[position] = flip_bit(bad[position], bit)
        assert _fails(lambda bad=bad: merkle.verify_inclusion(index, size, leaves[index], bad, root))
    # wrong index, truncated or extended proof
    if size > 1:
        other = (index + 1) % size
        assert _fails(lambda: merkle.verify_inclusion(other, size, leaves[index], proof, root))
    if proof:
        assert _fails(lambda: merkle.verify_inclusion(index, size, leaves[index], proof[:-1], root))
    assert _fails(lambda: merkle.verify_inclusion(index, size, leaves[index], [*proof, root], root))


@given(size=st.integers(1, 300), seed=st.integers(0, 2**32), data=st.data())
def test_every_consistency_proof_verifies_and_a_flipped_bit_fails(size: int, seed: int, data: st.DataObject) -> None:
    leaves = _leaves(size, seed)
    tree = MemoryTree(leaves)
    roots = [tree.root(n) for n in range(size + 1)]
    new = size
    for old in range(1, new + 1):  # every old size into the full tree
        merkle.verify_consistency(old, new, roots[old], roots[new], merkle.consistency_proof(old, new, tree.fetch))
    old = data.draw(st.integers(1, size), label="old")
    new = data.draw(st.integers(old, size), label="new")
    proof = merkle.consistency_proof(old, new, tree.fetch)
    merkle.verify_consistency(old, new, roots[old], roots[new], proof)
    bit = data.draw(st.integers(0, 255), label="bit")
    assert _fails(lambda: merkle.verify_consistency(old, new, flip_bit(roots[old], bit), roots[new], proof))
    assert _fails(lambda: merkle.verify_consistency(old, new, roots[old], flip_bit(roots[new], bit), proof))
    for position in range(len(proof)):
        bad = list(proof)
        bad[position] = flip_bit(bad[position], bit)
        assert _fails(lambda bad=bad: merkle.verify_consistency(old, new, roots[old], roots[new], bad))
    if old < new:
        assert _fails(lambda: merkle.verify_consistency(old, new, roots[old], roots[new], proof[:-1]))
        if old > 1:
            assert _fails(lambda: merkle.verify_consistency(old - 1, new, roots[old], roots[new], proof))


@pytest.mark.parametrize("size", [1, 2, 3, 127, 300])
def test_a_stored_ledger_matches_a_recomputed_tree(tmp_path, size: int) -> None:  # type: ignore[no-untyped-def]
    """Proofs from the store's subtree hashes equal those of a tree recomputed from the event hashes."""
    root_key = Signer.generate("root")
    book = Ledger(f"sqlite:///{tmp_path / 't.db'}")
    book.init("tally.test/ledger", root_key)
    fill(book, root_key, size - 1, batch=97)
    events = list(book.events())
    assert len(events) == size
    leaves = [merkle.hash_leaf(e.raw_hash) for e in events]
    tree = MemoryTree(leaves)
    sizes = sorted({n for n in (1, 2, size // 2, size - 1, size) if 1 <= n <= size})
    for n in sizes:
        assert book.root(n) == tree.root(n)
    for index in range(size):
        proof = book.inclusion_proof(index, size)
        assert proof == merkle.inclusion_proof(index, size, tree.fetch)
        merkle.verify_inclusion(index, size, leaves[index], proof, tree.root(size))
    for old in range(1, size + 1):
        proof = book.consistency_proof(old, size)
        assert proof == merkle.consistency_proof(old, size, tree.fetch)
        merkle.verify_consistency(old, size, tree.root(old), tree.root(size), proof)
    book.close()
