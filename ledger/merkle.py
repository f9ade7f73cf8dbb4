"""Merkle commitments of an FLChain round (Majeed & Hong, 2019; ledger v2).

FLChain records on its channel ledger which local updates an edge server aggregated. Rather than
one transaction or one hash per client on chain, a round commits to two Merkle roots: one over
every submission the defense saw (:func:`submission_leaf`) and one over the clients admitted to
the channel this round (:func:`admission_leaf`: a client's id and public key, the first time it
submits). A client proves its update was in a round with its leaf and a logarithmic-size proof
(:func:`merkle_proof`, :func:`verify_proof`) against the on-chain root.

Construction (RFC 6962-style prefixes; leaves also carry a per-kind domain tag):

* submission leaf = ``sha256(0x00 || "FLCHAIN-SUBMISSION-v2" || client (8-byte big-endian) ||
  update_hash || samples (8-byte big-endian) || base_hash || record_hash)``;
* admission leaf = ``sha256(0x00 || "FLCHAIN-ADMISSION-v2" || client (8) || public key (33,
  compressed secp256k1))``;
* inner = ``sha256(0x01 || left || right)``;
* a level with an odd number of nodes promotes its last node unchanged to the next level. It is
  *not* paired with a copy of itself, so two different leaf lists can never share a root the way
  duplicated-last-node trees can (the ambiguity behind CVE-2012-2459);
* no leaves -> 32 zero bytes; one leaf -> that leaf.

Leaves are taken in the order given; callers sort them by client id so the root is canonical.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

HASH_LEN = 32
EMPTY_ROOT = bytes(HASH_LEN)
LEAF_PREFIX = b"\x00"
INNER_PREFIX = b"\x01"

Proof = list[tuple[bytes, bool]]


def _check_hash(value: object, what: str) -> bytes:
    if not isinstance(value, bytes | bytearray):
        raise ValueError(f"{what} must be bytes, got {type(value).__name__}")
    if len(value) != HASH_LEN:
        raise ValueError(f"{what} must be {HASH_LEN} bytes, got {len(value)}")
    return bytes(value)


SUBMISSION_TAG = b"FLCHAIN-SUBMISSION-v2"
ADMISSION_TAG = b"FLCHAIN-ADMISSION-v2"


def _u64(value: object, what: str) -> bytes:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{what} must be an int, got {type(value).__name__}")
    if not 0 <= int(value) < 2**64:
        raise ValueError(f"{what} must be in [0, 2**64), got {value}")
    return int(value).to_bytes(8, "big")


def submission_leaf(
    client_id: int, update_hash: bytes, samples: int, base_hash: bytes, record_hash: bytes
) -> bytes:
    """Hash one submission of a round into a Merkle leaf.

    Parameters
    ----------
    client_id : int
        Client (FLChain device) id, ``0 <= client_id < 2**64``.
    update_hash : bytes
        32-byte SHA-256 of the client's update blob.
    samples : int
        Its local sample count (the aggregation weight of linear rules).
    base_hash : bytes
        32-byte hash of the global model it trained from.
    record_hash : bytes
        32-byte SHA-256 of its signed update record.

    Returns
    -------
    bytes
        The 32-byte leaf.

    Raises
    ------
    ValueError
        An id or count outside ``[0, 2**64)``, or a hash that is not 32 bytes.
    """
    return hashlib.sha256(
        LEAF_PREFIX
        + SUBMISSION_TAG
        + _u64(client_id, "client_id")
        + _check_hash(update_hash, "update_hash")
        + _u64(samples, "samples")
        + _check_hash(base_hash, "base_hash")
        + _check_hash(record_hash, "record_hash")
    ).digest()


def admission_leaf(client_id: int, public_key: bytes) -> bytes:
    """Hash one admitted client (its id and 33-byte compressed secp256k1 key) into a leaf."""
    if not isinstance(public_key, bytes | bytearray) or len(public_key) != 33:
        raise ValueError("public_key must be 33 bytes (compressed secp256k1)")
    return hashlib.sha256(
        LEAF_PREFIX + ADMISSION_TAG + _u64(client_id, "client_id") + bytes(public_key)
    ).digest()


def _inner(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(INNER_PREFIX + left + right).digest()


def _next_level(level: list[bytes]) -> list[bytes]:
    nxt = [_inner(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
    if len(level) % 2 == 1:
        nxt.append(level[-1])  # promoted unchanged, never duplicated
    return nxt


def _levels(leaves: Sequence[bytes]) -> list[list[bytes]]:
    level = [_check_hash(x, f"leaf {i}") for i, x in enumerate(leaves)]
    levels = [level]
    while len(level) > 1:
        level = _next_level(level)
        levels.append(level)
    return levels


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """Root of the domain-separated binary Merkle tree over ``leaves``.

    Parameters
    ----------
    leaves : Sequence[bytes]
        32-byte leaf hashes (:func:`submission_leaf`, :func:`admission_leaf`), in canonical
        (client-id) order.

    Returns
    -------
    bytes
        32-byte root; :data:`EMPTY_ROOT` (all zeros) for no leaves, the leaf itself for one.

    Raises
    ------
    ValueError
        If a leaf is not 32 bytes.
    """
    if len(leaves) == 0:
        return EMPTY_ROOT
    return _levels(leaves)[-1][0]


def merkle_proof(leaves: Sequence[bytes], index: int) -> Proof:
    """Inclusion proof for ``leaves[index]``.

    Parameters
    ----------
    leaves : Sequence[bytes]
        The same leaves that were passed to :func:`merkle_root`.
    index : int
        Position of the leaf to prove.

    Returns
    -------
    list of (bytes, bool)
        From the bottom up, each sibling hash and whether that sibling is on the *left*. Levels
        where the node was promoted without a sibling contribute no step.

    Raises
    ------
    IndexError
        If ``index`` is outside ``range(len(leaves))``.
    ValueError
        If a leaf is not 32 bytes.
    """
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf index {index} out of range for {len(leaves)} leaves")
    proof: Proof = []
    pos = index
    for level in _levels(leaves)[:-1]:
        sibling = pos ^ 1
        if sibling < len(level):
            proof.append((level[sibling], sibling < pos))
        pos //= 2
    return proof


def verify_proof(leaf: bytes, proof: Sequence[tuple[bytes, bool]], root: bytes) -> bool:
    """Check an inclusion proof produced by :func:`merkle_proof`.

    Parameters
    ----------
    leaf : bytes
        32-byte leaf hash being proven.
    proof : Sequence[tuple[bytes, bool]]
        ``(sibling_hash, sibling_is_left)`` steps from the bottom up.
    root : bytes
        Expected 32-byte Merkle root (e.g. as recorded on the FLChain ledger).

    Returns
    -------
    bool
        True if folding the proof over ``leaf`` yields ``root``; False for a mismatch or for
        malformed input (never raises).
    """
    try:
        node = _check_hash(leaf, "leaf")
        expected = _check_hash(root, "root")
        for sibling, is_left in proof:
            sib = _check_hash(sibling, "sibling")
            node = _inner(sib, node) if is_left else _inner(node, sib)
    except (ValueError, TypeError):
        return False
    return node == expected
