"""Checking the FLChain committee's BLS attestations (:mod:`ledger.committee` signs them).

An :class:`Attestation` is the aggregate signature of the approving validators over one round
commitment. Anyone holding the committee's public information (:meth:`Committee.public_info
<ledger.committee.Committee.public_info>`) checks the validators' proofs of possession once
(:func:`verify_registration`), then each attestation with ``FastAggregateVerify`` over its
signers' keys (:func:`verify_attestation`) or a whole run's at once (:func:`verify_attestations`).
Ciphersuite ``BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_`` on blspy: public keys in G1
(48 bytes), signatures in G2 (96 bytes). Measured on one core (tests print them):
:func:`verify_attestation` ~1.2 ms, :func:`verify_attestations` ~0.4 ms per round.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from blspy import G1Element, G2Element, PopSchemeMPL

from ledger.commitment import fixed_bytes, g2_eip2537

PUBKEY_LEN = 48
SIGNATURE_LEN = 96


def default_quorum(size: int) -> int:
    """Smallest number of signers that is strictly more than two thirds of ``size``."""
    return 2 * size // 3 + 1


@dataclass(frozen=True)
class Attestation:
    """Aggregate BLS signature of the approving validators over one message.

    ``signers`` are strictly increasing validator indices, ``signature`` the 96-byte compressed
    G2 aggregate and ``message`` the signed 32-byte commitment.
    """

    signers: tuple[int, ...]
    signature: bytes
    message: bytes

    def hash(self) -> bytes:
        """SHA-256 of the aggregate signature."""
        return hashlib.sha256(self.signature).digest()

    def bitmap(self) -> int:
        """The signers as the contract's bitmap: bit ``i`` set when validator ``i`` signed."""
        return sum(1 << i for i in set(self.signers))

    def signature_eip2537(self) -> bytes:
        """The signature in EIP-2537 G2 encoding (256 bytes), as ``commit`` takes it."""
        return g2_eip2537(self.signature)

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
        signature = fixed_bytes(bytes.fromhex(data["signature"]), SIGNATURE_LEN, "signature")
        return cls(signers, signature, bytes.fromhex(data["message"]))

    @classmethod
    def from_bitmap(cls, bitmap: int, signature: bytes, message: bytes) -> Attestation:
        """An attestation from the contract's view: signer bitmap, 96-byte signature, message."""
        if isinstance(bitmap, bool) or not isinstance(bitmap, int) or bitmap < 0:
            raise ValueError(f"bitmap must be a non-negative int, got {bitmap!r}")
        signers = tuple(i for i in range(bitmap.bit_length()) if bitmap >> i & 1)
        return cls(signers, fixed_bytes(signature, SIGNATURE_LEN, "signature"), bytes(message))


_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError)


def _point(hex_str: str, cls: type[G1Element] | type[G2Element], length: int) -> Any:
    """A blspy point from hex (blspy checks the curve and the subgroup; ValueError if not)."""
    return cls.from_bytes(fixed_bytes(bytes.fromhex(hex_str), length, cls.__name__))


def _pubkeys(public_info: Sequence[Mapping[str, Any]]) -> list[G1Element] | None:
    """The committee's keys in index order, or None if an entry is malformed."""
    try:
        if [e["index"] for e in public_info] != list(range(len(public_info))):
            return None
        return [_point(e["pubkey"], G1Element, PUBKEY_LEN) for e in public_info]
    except _MALFORMED:
        return None


def verify_registration(public_info: Sequence[Mapping[str, Any]]) -> list[int]:
    """Positions whose proof of possession fails ``PopVerify`` (or is malformed); ~1 ms each."""
    bad = []
    for pos, entry in enumerate(public_info):
        try:
            pk = _point(entry["pubkey"], G1Element, PUBKEY_LEN)
            pop = _point(entry["pop"], G2Element, SIGNATURE_LEN)
            ok = entry["index"] == pos and PopSchemeMPL.pop_verify(pk, pop)
        except _MALFORMED:
            ok = False
        if not ok:
            bad.append(pos)
    return bad


def _checked_item(
    keys: Sequence[G1Element] | None, entry: tuple[Attestation, bytes], quorum: int | None
) -> tuple[G1Element, bytes, G2Element] | None:
    """``(aggregate key of the signers, message, signature)``, or None if a check fails."""
    try:
        attestation, message = entry
        if keys is None or not isinstance(message, bytes) or attestation.message != message:
            return None
        need = max(default_quorum(len(keys)) if quorum is None else quorum, 1)
        signers = tuple(attestation.signers)
        if not (
            len(signers) >= need
            and all(type(i) is int for i in signers)
            and all(a < b for a, b in zip(signers, signers[1:], strict=False))
            and 0 <= signers[0]
            and signers[-1] < len(keys)
        ):
            return None  # a repeated signer would let one key count several times
        signature = G2Element.from_bytes(fixed_bytes(attestation.signature, 96, "signature"))
        apk = keys[signers[0]]
        for i in signers[1:]:
            apk = apk + keys[i]
        return apk, message, signature
    except _MALFORMED:
        return None


def verify_attestation(
    public_info: Sequence[Mapping[str, Any]],
    attestation: Attestation,
    message: bytes,
    quorum: int | None = None,
) -> bool:
    """Check ``attestation`` over ``message`` against the committee's public keys.

    ``public_info`` is :meth:`Committee.public_info` (PoPs checked by :func:`verify_registration`);
    ``quorum`` defaults to more than two thirds of the committee. Returns ``FastAggregateVerify``
    over the signers' keys, or False (never an exception) for malformed input, a message
    mismatch, signers out of range, below quorum or not strictly increasing.
    """
    item = _checked_item(_pubkeys(public_info), (attestation, message), quorum)
    return item is not None and PopSchemeMPL.verify(*item)


def verify_attestations(
    public_info: Sequence[Mapping[str, Any]],
    items: Sequence[tuple[Attestation, bytes]],
    quorum: int | None = None,
) -> list[bool]:
    """:func:`verify_attestation` of each ``(attestation, message)`` pair, batched.

    The structurally sound items are checked together by one
    ``PopSchemeMPL.aggregate_verify(apks, messages, sum of signatures)``: one Miller loop per
    round plus one, and a single final exponentiation (~0.4 ms a round against ~1.2 ms one by
    one). If that fails, every item is verified on its own to find the bad ones; malformed
    items give False.

    What the batch proves: ``prod_r e(apk_r, H(m_r)) = e(g1, sum_r sig_r)``. Under the
    security of aggregate BLS signatures with proofs of possession (the PoP scheme's
    AggregateVerify, which allows repeated messages), nobody without the keys can produce
    this unless each claimed signer set really signed each round's message. What it
    does not prove: that each round's 96-byte ``signature`` is that round's own aggregate; the
    weights are all one (blspy exposes no scalar multiplication, so no random linear
    combination), so sig_1 + D and sig_2 - D pass as well as sig_1 and sig_2. Each round's
    signature bytes are pinned elsewhere: the ``commit`` transaction carries them (the
    ``Committed`` event) and, with ``verify_signatures``, the contract checked them one by one;
    an audit compares the recorded bytes with the event's. (milagro_bls_binding's
    ``VerifyMultipleAggregateSignatures``, a random-weight batch, returned False on valid
    input here, and the package is deprecated, so it is not used.)
    """
    keys = _pubkeys(public_info)
    checked = [_checked_item(keys, entry, quorum) for entry in items]
    todo = [item for item in checked if item is not None]
    all_ok = len(todo) > 1 and PopSchemeMPL.aggregate_verify(
        [k for k, _, _ in todo],
        [m for _, m, _ in todo],
        PopSchemeMPL.aggregate([s for _, _, s in todo]),
    )
    return [item is not None and (all_ok or PopSchemeMPL.verify(*item)) for item in checked]
