"""RFC 6962 / RFC 9162 Merkle tree math (``docs/format.md``, the Merkle tree). Pure: no I/O.

Leaf i of the ledger's tree is the raw 32-byte hash of event seq i+1. A complete
subtree is addressed as ``(level, index)``: leaves ``[index * 2^level, (index+1) * 2^level)``.
Proofs are produced from complete-subtree hashes fetched through a callback, so a
store answers them with O(log n) reads and never recomputes the tree.

Verification follows RFC 9162 2.1.3.2 and 2.1.4.2 with the edge cases the
transparency-dev conformance probes require (index >= size, hashes not 32 bytes,
consistency from size 0, equal sizes with a non-empty proof).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .errors import FormatError, VerificationError

__all__ = [
    "EMPTY_ROOT",
    "Frontier",
    "NodeFetch",
    "consistency_proof",
    "consistency_proofs",
    "frontier_nodes",
    "hash_children",
    "hash_leaf",
    "inclusion_proof",
    "inclusion_proofs",
    "is_valid_subtree",
    "root_from_leaves",
    "root_of_size",
    "verify_consistency",
    "verify_inclusion",
    "verify_subtree_consistency",
    "verify_subtree_inclusion",
]

EMPTY_ROOT = hashlib.sha256(b"").digest()

Node = tuple[int, int]
NodeFetch = Callable[[Sequence[Node]], Mapping[Node, bytes]]


def hash_leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def hash_children(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """Largest power of two strictly smaller than ``n`` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


# ---------------------------------------------------------------------------
# Appending: the frontier (compact range [0, size)).


@dataclass
class Frontier:
    """The right edge of a tree of ``size`` leaves: one complete subtree per set bit."""

    size: int = 0
    stack: list[tuple[int, bytes]] = field(default_factory=list)  # (level, hash), levels decreasing

    def append(self, leaf_hash: bytes) -> list[tuple[int, int, bytes]]:
        """Add a leaf; returns the complete subtrees of level >= 1 that it finished."""
        made: list[tuple[int, int, bytes]] = []
        level, value = 0, leaf_hash
        stack = self.stack
        while stack and stack[-1][0] == level:
            _, left = stack.pop()
            value = hashlib.sha256(b"\x01" + left + value).digest()
            level += 1
            made.append((level, (self.size + 1 >> level) - 1, value))
        stack.append((level, value))
        self.size += 1
        return made

    def root(self) -> bytes:
        if not self.stack:
            return EMPTY_ROOT
        value = self.stack[-1][1]
        for _, left in reversed(self.stack[:-1]):
            value = hash_children(left, value)
        return value

    def copy(self) -> Frontier:
        return Frontier(self.size, list(self.stack))


def frontier_nodes(size: int) -> list[Node]:
    """The complete subtrees (level, index) that make up the frontier of ``size``."""
    nodes: list[Node] = []
    start = 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            nodes.append((level, start >> level))
            start += 1 << level
    return nodes


def root_from_leaves(leaves: Iterable[bytes]) -> bytes:
    frontier = Frontier()
    for leaf in leaves:
        frontier.append(leaf)
    return frontier.root()


# ---------------------------------------------------------------------------
# Producing proofs from stored complete subtrees.


def _range_nodes(start: int, end: int, out: list[Node]) -> None:
    """Complete subtrees whose hashes give MTH(D[start:end]) (end is the right edge)."""
    while start < end:
        size = end - start
        if size & (size - 1) == 0 and start % size == 0:
            out.append((size.bit_length() - 1, start // size))
            return
        k = _split(size)
        out.append((k.bit_length() - 1, start // k))
        start += k


def _range_hash(start: int, end: int, nodes: Mapping[Node, bytes]) -> bytes:
    parts: list[Node] = []
    _range_nodes(start, end, parts)
    value = nodes[parts[-1]]
    for node in reversed(parts[:-1]):
        value = hash_children(nodes[node], value)
    return value


def _inclusion_ranges(index: int, start: int, end: int) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start += k
    ranges.reverse()
    return ranges


def _consistency_ranges(old: int, start: int, end: int) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    complete = True
    while True:
        if old == end - start:
            if not complete:
                ranges.append((start, end))
            break
        k = _split(end - start)
        if old <= k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            old -= k
            start += k
            complete = False
    ranges.reverse()
    return ranges


def _resolve(ranges: list[tuple[int, int]], fetch: NodeFetch) -> list[bytes]:
    wanted: list[Node] = []
    for start, end in ranges:
        _range_nodes(start, end, wanted)
    nodes = fetch(sorted(set(wanted)))
    return [_range_hash(start, end, nodes) for start, end in ranges]


def inclusion_proof(index: int, size: int, fetch: NodeFetch) -> list[bytes]:
    """RFC 9162 2.1.3.1 inclusion path of leaf ``index`` in the tree of ``size``."""
    if not 0 <= index < size:
        raise FormatError(f"index {index} is not inside a tree of size {size}")
    return _resolve(_inclusion_ranges(index, 0, size), fetch)


def inclusion_proofs(indices: Sequence[int], size: int, fetch: NodeFetch) -> list[list[bytes]]:
    """Inclusion paths of several leaves in the tree of ``size``, with one ``fetch``."""
    for index in indices:
        if not 0 <= index < size:
            raise FormatError(f"index {index} is not inside a tree of size {size}")
    every = [_inclusion_ranges(index, 0, size) for index in indices]
    wanted: list[Node] = []
    for ranges in every:
        for start, end in ranges:
            _range_nodes(start, end, wanted)
    nodes = fetch(sorted(set(wanted)))
    return [[_range_hash(start, end, nodes) for start, end in ranges] for ranges in every]


def consistency_proof(old: int, new: int, fetch: NodeFetch) -> list[bytes]:
    """RFC 9162 2.1.4.1 consistency proof from size ``old`` to ``new`` (0 < old <= new)."""
    if not 0 < old <= new:
        raise FormatError(f"no consistency proof from size {old} to {new}")
    if old == new:
        return []
    return _resolve(_consistency_ranges(old, 0, new), fetch)


def consistency_proofs(olds: Sequence[int], new: int, fetch: NodeFetch) -> list[list[bytes]]:
    """Consistency proofs from several sizes to ``new``, with one ``fetch``."""
    for old in olds:
        if not 0 < old <= new:
            raise FormatError(f"no consistency proof from size {old} to {new}")
    every = [_consistency_ranges(old, 0, new) if old != new else [] for old in olds]
    wanted: list[Node] = []
    for ranges in every:
        for start, end in ranges:
            _range_nodes(start, end, wanted)
    nodes = fetch(sorted(set(wanted))) if wanted else {}
    return [[_range_hash(start, end, nodes) for start, end in ranges] for ranges in every]


def root_of_size(size: int, fetch: NodeFetch) -> bytes:
    if size == 0:
        return EMPTY_ROOT
    return _resolve([(0, size)], fetch)[0]


# ---------------------------------------------------------------------------
# Verification (RFC 9162 2.1.3.2 and 2.1.4.2).


def _check_hashes(hashes: Sequence[bytes], what: str) -> None:
    for position, value in enumerate(hashes):
        if len(value) != 32:
            raise VerificationError(f"{what}: hash {position} is {len(value)} bytes, not 32", rule="proof")


def verify_inclusion(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise ``VerificationError`` unless ``proof`` proves leaf ``index`` under ``root``."""
    _check_hashes([leaf_hash, root, *proof], "inclusion proof")
    if index < 0 or index >= size:
        raise VerificationError(f"index {index} is not inside a tree of size {size}", rule="proof")
    fn, sn, value = index, size - 1, leaf_hash
    for sibling in proof:
        if sn == 0:
            raise VerificationError("inclusion proof is too long", rule="proof")
        if fn & 1 or fn == sn:
            value = hash_children(sibling, value)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            value = hash_children(value, sibling)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise VerificationError("inclusion proof is too short", rule="proof")
    if value != root:
        raise VerificationError("inclusion proof does not lead to the root", rule="proof")


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Raise ``VerificationError`` unless ``proof`` shows tree ``old`` is a prefix of ``new``.

    Equal sizes need an empty proof and equal roots (compared as given, as the
    conformance suite expects); otherwise every hash must be 32 bytes.
    """
    if old < 1:
        raise VerificationError("no consistency proof from an empty tree", rule="proof")
    if new < old:
        raise VerificationError(f"size {new} is smaller than {old}", rule="proof")
    if old == new:
        if proof:
            raise VerificationError("equal sizes need an empty proof", rule="proof")
        if old_root != new_root:
            raise VerificationError("equal sizes with different roots", rule="proof")
        return
    _check_hashes([old_root, new_root, *proof], "consistency proof")
    if not proof:
        raise VerificationError("empty consistency proof", rule="proof")
    path = list(proof)
    if old & (old - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    first = second = path[0]
    for node in path[1:]:
        if sn == 0:
            raise VerificationError("consistency proof is too long", rule="proof")
        if fn & 1 or fn == sn:
            first = hash_children(node, first)
            second = hash_children(node, second)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            second = hash_children(second, node)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise VerificationError("consistency proof is too short", rule="proof")
    if first != old_root or second != new_root:
        raise VerificationError("consistency proof does not match the roots", rule="proof")


# ---------------------------------------------------------------------------
# Subtrees [start, end) (draft-davidben-tls-merkle-tree-certs, appendix B; the
# transparency-dev "subtree" probes). A subtree is valid when start < end and start
# is a multiple of the smallest power of two >= end - start; its hash is MTH of
# those leaves. A subtree starting at 0 is the tree of size ``end``.


def is_valid_subtree(start: int, end: int) -> bool:
    if not 0 <= start < end:
        return False
    width = 1 << (end - start - 1).bit_length()
    return start % width == 0


def _subtree_root(start: int, end: int, size: int, node_hash: bytes, proof: Sequence[bytes]) -> bytes:
    """The root of the tree of ``size`` that ``proof`` derives from subtree [start, end)."""
    if not is_valid_subtree(start, end):
        raise VerificationError(f"[{start}, {end}) is not a valid subtree", rule="proof")
    if size < end:
        raise VerificationError(f"subtree [{start}, {end}) is beyond size {size}", rule="proof")
    _check_hashes(proof, "subtree proof")
    # fn, sn, tn: paths to the subtree's first and last leaf and to the tree's last leaf.
    fn, sn, tn = start, end - 1, size - 1
    if sn == tn:  # the subtree's right edge is the tree's: start at the subtree's top
        while fn != sn:
            fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    else:  # climb while the right edge closes a complete subtree inside [start, end)
        while fn != sn and sn & 1:
            fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    path = list(proof)
    if fn == sn:
        node = root = node_hash
    else:
        if not path:
            raise VerificationError("subtree proof is too short", rule="proof")
        node = root = path.pop(0)
    for sibling in path:
        if tn == 0:
            raise VerificationError("subtree proof is too long", rule="proof")
        if sn & 1 or sn == tn:
            if fn < sn:
                node = hash_children(sibling, node)
            root = hash_children(sibling, root)
            while sn and not sn & 1:
                fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
        else:
            root = hash_children(root, sibling)
        fn, sn, tn = fn >> 1, sn >> 1, tn >> 1
    if tn != 0:
        raise VerificationError("subtree proof is too short", rule="proof")
    if node != node_hash:
        raise VerificationError("subtree proof does not lead to the subtree hash", rule="proof")
    return root


def verify_subtree_consistency(
    start: int, end: int, size: int, subtree_hash: bytes, root: bytes, proof: Sequence[bytes]
) -> None:
    """Raise unless ``proof`` shows subtree [start, end) with ``subtree_hash`` is in the tree ``root``.

    An empty subtree (start == end <= size) is consistent with any tree when its hash
    is the empty hash and the proof is empty. Hashes are compared as given.
    """
    if start == end and 0 <= start <= size:
        if proof:
            raise VerificationError("an empty subtree needs an empty proof", rule="proof")
        if subtree_hash != EMPTY_ROOT:
            raise VerificationError("an empty subtree must have the empty hash", rule="proof")
        return
    if _subtree_root(start, end, size, subtree_hash, proof) != root:
        raise VerificationError("subtree consistency proof does not lead to the root", rule="proof")


def verify_subtree_inclusion(
    index: int, start: int, end: int, leaf_hash: bytes, proof: Sequence[bytes], subtree_hash: bytes
) -> None:
    """Raise unless ``proof`` shows leaf ``index`` is in subtree [start, end) with ``subtree_hash``."""
    _check_hashes([leaf_hash, subtree_hash], "subtree inclusion proof")
    if not is_valid_subtree(start, end):
        raise VerificationError(f"[{start}, {end}) is not a valid subtree", rule="proof")
    if not start <= index < end:
        raise VerificationError(f"index {index} is not inside subtree [{start}, {end})", rule="proof")
    offset = index - start
    if _subtree_root(offset, offset + 1, end - start, leaf_hash, proof) != subtree_hash:
        raise VerificationError("subtree inclusion proof does not lead to the subtree hash", rule="proof")
