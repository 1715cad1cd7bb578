"""RFC 9162 conformance: every transparency-dev/merkle probe, and the 8-leaf vectors, exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ledger import merkle
from ledger.errors import FormatError, VerificationError

from .helpers import SHARED_TLOG, MemoryTree, b64, probes, vectors


def _proof(probe: dict[str, Any]) -> list[bytes]:
    return [b64(p) for p in probe["proof"] or []]


def _outcome(check: Any) -> bool:
    try:
        check()
    except VerificationError:
        return False
    return True


def _ids(kind: str) -> list[str]:
    return sorted(path for path in probes() if path.split("/")[0] == kind)


@pytest.mark.parametrize("path", _ids("inclusion"))
def test_inclusion_probe(path: str) -> None:
    p = probes()[path]
    ok = _outcome(lambda: merkle.verify_inclusion(p["leafIdx"], p["treeSize"], b64(p["leafHash"]), _proof(p),
                                                  b64(p["root"])))
    assert ok is not p["wantErr"], p["desc"]


@pytest.mark.parametrize("path", _ids("consistency"))
def test_consistency_probe(path: str) -> None:
    p = probes()[path]
    ok = _outcome(lambda: merkle.verify_consistency(p["size1"], p["size2"], b64(p["root1"]), b64(p["root2"]),
                                                    _proof(p)))
    assert ok is not p["wantErr"], p["desc"]


@pytest.mark.parametrize("path", _ids("subtreeinclusion"))
def test_subtree_inclusion_probe(path: str) -> None:
    p = probes()[path]
    ok = _outcome(lambda: merkle.verify_subtree_inclusion(p["leafIdx"], p["start"], p["end"], b64(p["leafHash"]),
                                                          _proof(p), b64(p["root"])))
    assert ok is not p["wantErr"], p["desc"]
    if p["start"] == 0 and p["end"] > 0:  # a subtree from 0 is the tree of size `end`: same answer
        plain = _outcome(lambda: merkle.verify_inclusion(p["leafIdx"], p["end"], b64(p["leafHash"]), _proof(p),
                                                         b64(p["root"])))
        assert plain is ok, p["desc"]


@pytest.mark.parametrize("path", _ids("subtreeconsistency"))
def test_subtree_consistency_probe(path: str) -> None:
    p = probes()[path]
    ok = _outcome(lambda: merkle.verify_subtree_consistency(p["start"], p["end"], p["size"], b64(p["root1"]),
                                                            b64(p["root2"]), _proof(p)))
    assert ok is not p["wantErr"], p["desc"]


def test_probe_counts() -> None:
    kinds = [path.split("/")[0] for path in probes()]
    assert kinds.count("inclusion") == 98 and kinds.count("consistency") == 98
    assert kinds.count("subtreeinclusion") == 204 and kinds.count("subtreeconsistency") == 118
    assert sum(1 for p in probes().values() if p["wantErr"]) > 400


@pytest.mark.skipif(not SHARED_TLOG.is_dir(), reason="the shared reference directory is not on this machine")
def test_vendored_probes_match_the_reference() -> None:
    base = SHARED_TLOG / "transparency-dev-merkle-testdata"
    found = {str(f.relative_to(base)): json.loads(f.read_text()) for f in base.rglob("*.json")}
    assert found == probes()
    for name in ("rfc6962_8leaf_vectors.json", "signed_note_vectors.json"):
        assert json.loads((SHARED_TLOG / name).read_text()) == vectors(name)


# --------------------------------------------------------------------------- the 8-leaf vectors


def _eight() -> tuple[dict[str, Any], list[bytes], MemoryTree]:
    data = vectors("rfc6962_8leaf_vectors.json")
    leaves = [merkle.hash_leaf(bytes.fromhex(h)) for h in data["leaf_inputs_hex"]]
    assert [leaf.hex() for leaf in leaves] == data["leaf_hashes"]
    return data, leaves, MemoryTree(leaves)


def test_eight_leaf_roots() -> None:
    data, leaves, tree = _eight()
    assert merkle.EMPTY_ROOT.hex() == data["empty_root"]
    for size, root in data["roots"].items():
        assert merkle.root_from_leaves(leaves[: int(size)]).hex() == root
        assert merkle.root_of_size(int(size), tree.fetch).hex() == root


def test_eight_leaf_inclusion_proofs_reproduced_and_verified() -> None:
    data, leaves, tree = _eight()
    assert len(data["inclusion"]) == 36
    for case in data["inclusion"]:
        index, size = case["index"], case["size"]
        proof = merkle.inclusion_proof(index, size, tree.fetch)
        assert [h.hex() for h in proof] == case["proof"], (index, size)
        merkle.verify_inclusion(index, size, leaves[index], proof, bytes.fromhex(data["roots"][str(size)]))
    batch = merkle.inclusion_proofs(list(range(8)), 8, tree.fetch)
    assert batch == [merkle.inclusion_proof(i, 8, tree.fetch) for i in range(8)]


def test_eight_leaf_consistency_proofs_reproduced_and_verified() -> None:
    data, _, tree = _eight()
    assert len(data["consistency"]) == 36
    for case in data["consistency"]:
        old, new = case["size1"], case["size2"]
        proof = merkle.consistency_proof(old, new, tree.fetch)
        assert [h.hex() for h in proof] == case["proof"], (old, new)
        merkle.verify_consistency(old, new, bytes.fromhex(data["roots"][str(old)]),
                                  bytes.fromhex(data["roots"][str(new)]), proof)
    batch = merkle.consistency_proofs(list(range(1, 9)), 8, tree.fetch)
    assert batch == [merkle.consistency_proof(old, 8, tree.fetch) for old in range(1, 9)]


def test_generator_refuses_impossible_proofs() -> None:
    _, _, tree = _eight()
    with pytest.raises(FormatError):
        merkle.inclusion_proof(8, 8, tree.fetch)
    with pytest.raises(FormatError):
        merkle.consistency_proof(0, 8, tree.fetch)
    with pytest.raises(FormatError):
        merkle.consistency_proof(5, 4, tree.fetch)


def test_rekor_v2_staging_entry_verifies() -> None:
    """A real Rekor v2 entry: leaf = SHA-256(0x00 || canonicalized body), index 645 of 646."""
    entry = vectors("signed_note_vectors.json")["rekor_v2_staging_entry"]
    leaf = merkle.hash_leaf(b64(entry["canonicalized_body_b64"]))
    hashes = [b64(h) for h in entry["inclusion_hashes_b64"]]
    root = b64(entry["root_hash_b64"])
    merkle.verify_inclusion(entry["log_index"], entry["tree_size"], leaf, hashes, root)
    with pytest.raises(VerificationError):  # sigstore-python's gap (c): index == size must fail
        merkle.verify_inclusion(entry["log_index"], entry["tree_size"] - 1, leaf, hashes, root)

