"""BLS-attesting committee of FLChain edge validators (Majeed & Hong, 2019).

In FLChain the global model of a channel is computed by MEC edge servers and recorded on the
channel ledger once the validators agree on it. Here each validator re-derives the round's
aggregate and, if it matches, signs :func:`attestation_message` (channel, round, global-model
hash, Merkle root of the accepted updates). The signatures are aggregated into one 96-byte BLS
signature that anyone can check against the committee's public keys.

Signatures use the proof-of-possession scheme of the IETF draft-irtf-cfrg-bls-signature
(Boneh-Lynn-Shacham over BLS12-381, signatures in G2, ``G2ProofOfPossession`` in py-ecc). Each
validator publishes a PoP once at registration (:func:`verify_registration`); that is what makes
``FastAggregateVerify`` over a single message safe against rogue-key attacks.

All validators sign the same message, and in this simulator they live in one process, so
:meth:`Committee.attest` hashes the message to G2 once per round and lets each validator do only
its scalar multiplication, both with the endomorphism-based routines of :mod:`ledger.bls_fast`
(~19 ms and ~8 ms, against ~83 ms and ~26 ms for py-ecc's reference code). The per-validator
signatures are byte-identical to ``bls.Sign(sk, message)``. Verification uses
:mod:`ledger.bls_verify` (~0.17 s against ~0.3 s for ``bls.FastAggregateVerify``, or less per
round when :func:`verify_attestations` batches rounds); it shares ``hash_to_g2`` with the signer,
so both are tested against py-ecc's reference ``hash_to_G2`` and ``FastAggregateVerify``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from py_ecc.bls import G2ProofOfPossession as bls
from py_ecc.bls.g2_primitives import G2_to_signature
from py_ecc.optimized_bls12_381 import Z2, add

from ledger.bls_fast import hash_to_g2, multiply_g2
from ledger.bls_verify import batch_verify, fast_aggregate_verify

ATTEST_DOMAIN = b"FLCHAIN-ATTEST-v1"
PUBKEY_LEN = 48
SIGNATURE_LEN = 96


class QuorumError(RuntimeError):
    """Fewer validators approved a round than the committee's quorum requires."""


def default_quorum(size: int) -> int:
    """Smallest number of signers that is strictly more than two thirds of ``size``."""
    return 2 * size // 3 + 1


def _fixed(value: object, length: int, what: str) -> bytes:
    if not isinstance(value, bytes | bytearray):
        raise ValueError(f"{what} must be bytes, got {type(value).__name__}")
    if len(value) != length:
        raise ValueError(f"{what} must be {length} bytes, got {len(value)}")
    return bytes(value)


def attestation_message(
    channel_id: bytes, rnd: int, global_hash: bytes, merkle_root: bytes
) -> bytes:
    """Bytes the committee signs for round ``rnd`` of an FLChain channel (121 bytes).

    ``b"FLCHAIN-ATTEST-v1" + channel_id (32) + rnd (8-byte big-endian) + global_hash (32, the
    global model blob's SHA-256) + merkle_root (32, see :func:`ledger.merkle.merkle_root`)``.

    Raises
    ------
    ValueError
        If a field has the wrong type or length, or ``rnd`` is not in ``[0, 2**64)``.
    """
    if isinstance(rnd, bool) or not isinstance(rnd, int) or not 0 <= rnd < 2**64:
        raise ValueError(f"rnd must be an int in [0, 2**64), got {rnd!r}")
    return (
        ATTEST_DOMAIN
        + _fixed(channel_id, 32, "channel_id")
        + rnd.to_bytes(8, "big")
        + _fixed(global_hash, 32, "global_hash")
        + _fixed(merkle_root, 32, "merkle_root")
    )


@dataclass(frozen=True)
class Validator:
    """One edge validator: BLS key pair and proof of possession.

    ``secret_key`` (int) is left out of ``repr`` and of :meth:`Committee.public_info`;
    ``public_key`` is a 48-byte compressed G1 point, ``pop`` the 96-byte ``bls.PopProve``.
    """

    index: int
    secret_key: int = field(repr=False)
    public_key: bytes
    pop: bytes

    @classmethod
    def from_secret(cls, index: int, secret_key: int) -> Validator:
        """Build a validator, deriving its public key and PoP from ``secret_key``."""
        return cls(
            index, secret_key, bytes(bls.SkToPk(secret_key)), bytes(bls.PopProve(secret_key))
        )


@dataclass(frozen=True)
class Attestation:
    """Aggregate BLS signature of the approving validators over one message.

    ``signers`` are strictly increasing validator indices, ``signature`` the 96-byte
    compressed G2 aggregate and ``message`` the signed :func:`attestation_message`.
    """

    signers: tuple[int, ...]
    signature: bytes
    message: bytes

    def hash(self) -> bytes:
        """SHA-256 of the aggregate signature, e.g. to record on the ledger."""
        return hashlib.sha256(self.signature).digest()

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (hex strings)."""
        return {
            "signers": list(self.signers),
            "signature": self.signature.hex(),
            "message": self.message.hex(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attestation:
        """Inverse of :meth:`to_dict`; raises ``ValueError``/``KeyError`` on malformed data."""
        signers = tuple(int(i) for i in data["signers"])
        signature = _fixed(bytes.fromhex(data["signature"]), SIGNATURE_LEN, "signature")
        return cls(signers, signature, bytes.fromhex(data["message"]))


class Committee:
    """The FLChain edge-validator committee that attests each round.

    ``validators`` must be in index order; ``quorum`` (minimum number of signers) defaults to
    more than two thirds of the committee.
    """

    def __init__(self, validators: Sequence[Validator], quorum: int | None = None) -> None:
        if len(validators) < 1:
            raise ValueError("a committee needs at least 1 validator, got 0")
        for i, v in enumerate(validators):
            if v.index != i:
                raise ValueError(f"validator at position {i} has index {v.index}")
        self.validators: tuple[Validator, ...] = tuple(validators)
        self.quorum = default_quorum(self.size) if quorum is None else quorum
        if not 1 <= self.quorum <= self.size:
            raise ValueError(f"quorum must be in [1, {self.size}], got {self.quorum}")

    @classmethod
    def from_seed(cls, seed: int | str, size: int = 4, quorum: int | None = None) -> Committee:
        """Deterministic committee, ``sk_i = KeyGen(sha256(f"flchain-committee:{seed}:{i}"))``.

        Raises ``ValueError`` if ``size < 1``.
        """
        if size < 1:
            raise ValueError(f"committee size must be >= 1, got {size}")
        validators = [
            Validator.from_secret(
                i, bls.KeyGen(hashlib.sha256(f"flchain-committee:{seed}:{i}".encode()).digest())
            )
            for i in range(size)
        ]
        return cls(validators, quorum)

    @property
    def size(self) -> int:
        """Number of validators."""
        return len(self.validators)

    def public_info(self) -> list[dict[str, Any]]:
        """Per-validator ``{"index", "pubkey", "pop"}`` (hex) for a run manifest; no secrets."""
        return [
            {"index": v.index, "pubkey": v.public_key.hex(), "pop": v.pop.hex()}
            for v in self.validators
        ]

    def sign_shares(self, message: bytes, signers: Sequence[int]) -> dict[int, bytes]:
        """Individual signatures of ``signers``, hashing ``message`` to G2 only once.

        Each value equals ``bls.Sign(validators[i].secret_key, message)`` byte for byte.
        """
        points = self._sign_points(message, signers)
        return {i: bytes(G2_to_signature(p)) for i, p in points.items()}

    def _sign_points(self, message: bytes, signers: Sequence[int]) -> dict[int, Any]:
        if not isinstance(message, bytes):
            raise ValueError(f"message must be bytes, got {type(message).__name__}")
        for i in signers:
            if not 0 <= i < self.size:
                raise ValueError(f"signer index {i} out of range for {self.size} validators")
        # Fast but exact G2 arithmetic (ledger.bls_fast); verification stays on py-ecc's code.
        h = hash_to_g2(message, bls.DST, bls.xmd_hash_function)
        return {i: multiply_g2(h, self.validators[i].secret_key) for i in signers}

    def attest(self, message: bytes, approve: Sequence[bool] | None = None) -> Attestation:
        """Aggregate signature of the approving validators over ``message``.

        ``approve[i] is False`` (default: all True) means validator ``i`` re-derived a different
        round aggregate and does not sign. Raises :class:`QuorumError` if fewer than
        :attr:`quorum` approve, ``ValueError`` if ``approve`` has the wrong length.
        """
        if approve is None:
            approve = [True] * self.size
        if len(approve) != self.size:
            raise ValueError(f"approve has {len(approve)} entries for {self.size} validators")
        signers = tuple(i for i, ok in enumerate(approve) if ok)
        if len(signers) < self.quorum:
            raise QuorumError(
                f"only {len(signers)} of {self.size} validators approved; "
                f"quorum needs {self.quorum}"
            )
        total = Z2
        for point in self._sign_points(message, signers).values():
            total = add(total, point)
        return Attestation(signers, bytes(G2_to_signature(total)), message)


def _pubkeys(public_info: Sequence[Mapping[str, Any]]) -> list[bytes]:
    keys = []
    for pos, entry in enumerate(public_info):
        if entry["index"] != pos:
            raise ValueError(f"public_info entry {pos} has index {entry['index']}")
        keys.append(_fixed(bytes.fromhex(entry["pubkey"]), PUBKEY_LEN, "pubkey"))
    return keys


def verify_registration(public_info: Sequence[Mapping[str, Any]]) -> list[int]:
    """Positions whose proof of possession fails ``bls.PopVerify`` (or is malformed).

    Run once when the committee registers and by audits; ~0.25 s per validator.
    """
    bad = []
    for pos, entry in enumerate(public_info):
        try:
            ok = entry["index"] == pos and bls.PopVerify(
                bytes.fromhex(entry["pubkey"]), bytes.fromhex(entry["pop"])
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            ok = False
        if not ok:
            bad.append(pos)
    return bad


def _checked_item(
    public_info: Sequence[Mapping[str, Any]], entry: tuple[Attestation, bytes], quorum: int | None
) -> tuple[list[bytes], bytes, bytes] | None:
    """``(signer keys, message, signature)`` to verify, or None if a structural check fails."""
    try:
        attestation, message = entry
        keys = _pubkeys(public_info)
        need = default_quorum(len(keys)) if quorum is None else quorum
        signers = tuple(attestation.signers)
        if not (
            isinstance(message, bytes)
            and attestation.message == message
            and len(signers) >= max(need, 1)
            and all(type(i) is int for i in signers)
            and all(a < b for a, b in zip(signers, signers[1:], strict=False))
            and 0 <= signers[0]
            and signers[-1] < len(keys)
        ):
            return None
        signature = _fixed(attestation.signature, SIGNATURE_LEN, "signature")
        return [keys[i] for i in signers], message, signature
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None


def verify_attestation(
    public_info: Sequence[Mapping[str, Any]],
    attestation: Attestation,
    message: bytes,
    quorum: int | None = None,
) -> bool:
    """Check ``attestation`` over ``message`` against the committee's public keys.

    ``public_info`` is :meth:`Committee.public_info` (PoPs checked by :func:`verify_registration`);
    ``quorum`` defaults to more than two thirds of the committee. Returns the result of
    ``bls.FastAggregateVerify`` over the signers' keys (computed by
    :func:`ledger.bls_verify.fast_aggregate_verify`, which caches ``KeyValidate`` per key), or
    False (never an exception) for malformed input, a message mismatch, signers out of range,
    below quorum or not strictly increasing (a repeated signer would let one key count several
    times).
    """
    item = _checked_item(public_info, (attestation, message), quorum)
    return item is not None and fast_aggregate_verify(*item)


def verify_attestations(
    public_info: Sequence[Mapping[str, Any]],
    items: Sequence[tuple[Attestation, bytes]],
    quorum: int | None = None,
) -> list[bool]:
    """:func:`verify_attestation` of each ``(attestation, message)`` pair, batched.

    The structurally sound items are checked together by :func:`ledger.bls_verify.batch_verify`
    (one final exponentiation; a forged item slips through with probability ``<= 2^-64``); if
    that fails, each is verified on its own to find the bad ones. Malformed entries give False.
    """
    checked = [_checked_item(public_info, entry, quorum) for entry in items]
    todo = [item for item in checked if item is not None]
    all_ok = len(todo) > 1 and batch_verify(todo)
    return [item is not None and (all_ok or fast_aggregate_verify(*item)) for item in checked]
