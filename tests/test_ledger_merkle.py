"""Merkle commitment to a round's accepted updates (FLChain, Majeed & Hong 2019).

Expected roots are recomputed here by hand with hashlib, independently of ``ledger.merkle``.
"""

from __future__ import annotations

import hashlib

import pytest

from ledger.merkle import EMPTY_ROOT, leaf, merkle_proof, merkle_root, verify_proof


def h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def node(left: bytes, right: bytes) -> bytes:
    return h(b"\x01" + left + right)


def update_hash(i: int) -> bytes:
    return h(f"update-{i}".encode())


LEAVES = [leaf(i, update_hash(i)) for i in range(9)]
A, B, C, D, E = LEAVES[:5]


def test_leaf_layout() -> None:
    uh = bytes(range(32))
    expected = h(b"\x00" + b"\x00\x00\x00\x00\x00\x00\x01\x02" + uh)
    assert leaf(258, uh) == expected
    assert len(leaf(0, uh)) == 32
    assert leaf(0, uh) != leaf(1, uh)


@pytest.mark.parametrize(
    ("client_id", "uhash", "msg"),
    [
        (-1, bytes(32), "client_id"),
        (2**64, bytes(32), "client_id"),
        (True, bytes(32), "client_id"),
        (1, bytes(31), "update_hash must be 32 bytes, got 31"),
        (1, "00" * 32, "update_hash must be bytes"),
    ],
)
def test_leaf_validation(client_id: int, uhash: bytes, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        leaf(client_id, uhash)


def test_root_empty_and_single() -> None:
    assert merkle_root([]) == b"\x00" * 32 == EMPTY_ROOT
    assert merkle_root([A]) == A


def test_root_two_three_five() -> None:
    assert merkle_root([A, B]) == node(A, B)
    # Three leaves: C is promoted unchanged, not paired with itself.
    assert merkle_root([A, B, C]) == node(node(A, B), C)
    assert merkle_root([A, B, C]) != node(node(A, B), node(C, C))
    # Five leaves: E is promoted twice.
    assert merkle_root([A, B, C, D, E]) == node(node(node(A, B), node(C, D)), E)


def test_no_duplication_ambiguity() -> None:
    # With last-node duplication, [A, B, C] and [A, B, C, C] would share a root.
    assert merkle_root([A, B, C]) != merkle_root([A, B, C, C])


def test_order_matters() -> None:
    assert merkle_root([A, B]) != merkle_root([B, A])
    assert merkle_root([A, B, C]) != merkle_root([A, C, B])


def test_root_rejects_bad_leaf() -> None:
    with pytest.raises(ValueError, match="leaf 1 must be 32 bytes, got 5"):
        merkle_root([A, b"short"])


def test_proof_shape_for_three() -> None:
    assert merkle_proof([A, B, C], 0) == [(B, False), (C, False)]
    assert merkle_proof([A, B, C], 1) == [(A, True), (C, False)]
    assert merkle_proof([A, B, C], 2) == [(node(A, B), True)]


@pytest.mark.parametrize("n", range(1, 10))
def test_proof_round_trip(n: int) -> None:
    leaves = LEAVES[:n]
    root = merkle_root(leaves)
    for i, lf in enumerate(leaves):
        proof = merkle_proof(leaves, i)
        assert verify_proof(lf, proof, root)
        assert len(proof) <= (n - 1).bit_length()
        # The same proof must not validate a different leaf.
        other = leaves[(i + 1) % n] if n > 1 else leaf(99, update_hash(99))
        assert not verify_proof(other, proof, root)


def test_tampered_leaf_and_proof_fail() -> None:
    leaves = LEAVES[:5]
    root = merkle_root(leaves)
    proof = merkle_proof(leaves, 3)
    assert verify_proof(D, proof, root)
    assert not verify_proof(leaf(3, update_hash(333)), proof, root)
    flipped = [(sib, not left) for sib, left in proof]
    assert not verify_proof(D, flipped, root)
    assert not verify_proof(D, proof[:-1], root)
    assert not verify_proof(D, proof, bytes(32))
    assert not verify_proof(D, [(b"x", True)], root)  # malformed -> False, no exception


def test_proof_index_out_of_range() -> None:
    with pytest.raises(IndexError, match="leaf index 3 out of range for 3 leaves"):
        merkle_proof([A, B, C], 3)
    with pytest.raises(IndexError):
        merkle_proof([], 0)
