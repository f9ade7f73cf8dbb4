"""Merkle commitments of an FLChain round (Majeed & Hong 2019; ledger v2).

Expected roots are recomputed here by hand with hashlib, independently of ``ledger.merkle``.
"""

from __future__ import annotations

import hashlib

import pytest

from ledger.merkle import (
    EMPTY_ROOT,
    admission_leaf,
    merkle_proof,
    merkle_root,
    submission_leaf,
    verify_proof,
)


def h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def node(left: bytes, right: bytes) -> bytes:
    return h(b"\x01" + left + right)


def update_hash(i: int) -> bytes:
    return h(f"update-{i}".encode())


def leaf(i: int, uh: bytes) -> bytes:
    return submission_leaf(i, uh, 10, bytes(32), bytes(32))


LEAVES = [leaf(i, update_hash(i)) for i in range(9)]
A, B, C, D, E = LEAVES[:5]


def test_leaf_layouts_by_hand() -> None:
    uh, bh, rh = bytes(range(32)), b"\x07" * 32, b"\x09" * 32
    expected = h(
        b"\x00"
        + b"FLCHAIN-SUBMISSION-v2"
        + (258).to_bytes(8, "big")
        + uh
        + (40).to_bytes(8, "big")
        + bh
        + rh
    )
    assert submission_leaf(258, uh, 40, bh, rh) == expected
    key = b"\x02" + b"\x11" * 32
    assert admission_leaf(5, key) == h(
        b"\x00" + b"FLCHAIN-ADMISSION-v2" + (5).to_bytes(8, "big") + key
    )
    # every field is bound: change one, the leaf changes; the two kinds never collide
    assert submission_leaf(258, uh, 41, bh, rh) != expected
    assert submission_leaf(258, uh, 40, rh, bh) != expected
    assert submission_leaf(259, uh, 40, bh, rh) != expected


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        ((-1, bytes(32), 1, bytes(32), bytes(32)), "client_id"),
        ((2**64, bytes(32), 1, bytes(32), bytes(32)), "client_id"),
        ((True, bytes(32), 1, bytes(32), bytes(32)), "client_id"),
        ((1, bytes(31), 1, bytes(32), bytes(32)), "update_hash must be 32 bytes, got 31"),
        ((1, "00" * 32, 1, bytes(32), bytes(32)), "update_hash must be bytes"),
        ((1, bytes(32), -3, bytes(32), bytes(32)), "samples"),
        ((1, bytes(32), 1, bytes(32), bytes(3)), "record_hash must be 32 bytes"),
    ],
)
def test_leaf_validation(args: tuple, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        submission_leaf(*args)
    with pytest.raises(ValueError, match="33 bytes"):
        admission_leaf(1, b"\x02" * 32)


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
