"""BLS-attesting committee of FLChain edge validators (Majeed & Hong, 2019), on blspy.

In FLChain the global model of a channel is computed by MEC edge servers and recorded on the
channel ledger once the validators agree on it. Here each validator re-derives the round's
aggregate and, if it matches, signs the round commitment (:func:`ledger.commitment.commit_message`);
the signatures are aggregated into one 96-byte BLS signature that the channel contract checks on
chain (EIP-2537 precompiles) and anyone can check off chain against the committee's public keys.

Signatures follow the IETF BLS signature draft (draft-irtf-cfrg-bls-signature-05), ciphersuite
``BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_``: public keys in G1 (48 bytes), signatures in G2
(96 bytes), with blspy's ``PopSchemeMPL`` (Chia's native implementation over relic). Each
validator publishes a proof of possession once at registration; that is what makes
``FastAggregateVerify`` over one message safe against rogue-key attacks. Checking (proofs of
possession, attestations, one round or many at once) is :mod:`ledger.attestation`'s.

Secret keys come from the draft's ``KeyGen`` (HKDF-SHA-256, salt ``H("BLS-SIG-KEYGEN-SALT-")``),
written out in :func:`keygen`: blspy's own ``key_gen`` follows an older draft and gives other keys.
Measured on one core (tests print them): a validator's share ~0.3 ms, a 4-validator attestation
~1 ms.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from blspy import G2Element, PopSchemeMPL, PrivateKey

from ledger.attestation import Attestation, default_quorum
from ledger.commitment import g1_eip2537

#: Order r of the BLS12-381 groups (secret keys are in [1, r)).
CURVE_ORDER = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001


class QuorumError(RuntimeError):
    """Fewer validators approved a round than the committee's quorum requires."""


def keygen(ikm: bytes, key_info: bytes = b"") -> int:
    """``KeyGen(IKM, key_info)`` of draft-irtf-cfrg-bls-signature-05, section 2.3.

    Repeats ``salt = H(salt)``, ``PRK = HKDF-Extract(salt, IKM || I2OSP(0, 1))``,
    ``OKM = HKDF-Expand(PRK, key_info || I2OSP(48, 2), 48)``, ``SK = OS2IP(OKM) mod r``
    until ``SK != 0``.
    """
    if len(ikm) < 32:
        raise ValueError(f"KeyGen needs at least 32 bytes of key material, got {len(ikm)}")
    salt, sk = b"BLS-SIG-KEYGEN-SALT-", 0
    while sk == 0:
        salt = hashlib.sha256(salt).digest()
        prk = hmac.new(salt, ikm + b"\x00", hashlib.sha256).digest()
        okm, block, info = b"", b"", key_info + (48).to_bytes(2, "big")
        for i in range(1, 3):  # HKDF-Expand: two SHA-256 blocks cover L = 48
            block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
            okm += block
        sk = int.from_bytes(okm[:48], "big") % CURVE_ORDER
    return sk


@dataclass(frozen=True)
class Validator:
    """One edge validator: blspy secret key, 48-byte public key and 96-byte proof of possession.

    ``secret_key`` is left out of ``repr`` and of :meth:`Committee.public_info`.
    """

    index: int
    secret_key: PrivateKey = field(repr=False)
    public_key: bytes
    pop: bytes

    @classmethod
    def from_secret(cls, index: int, secret_key: int) -> Validator:
        """Build a validator from an integer secret key in ``[1, r)``."""
        sk = PrivateKey.from_bytes(secret_key.to_bytes(32, "big"))
        return cls(index, sk, bytes(sk.get_g1()), bytes(PopSchemeMPL.pop_prove(sk)))


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
                i, keygen(hashlib.sha256(f"flchain-committee:{seed}:{i}".encode()).digest())
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

    def pubkeys_eip2537(self) -> list[bytes]:
        """Public keys in EIP-2537 G1 encoding (128 bytes each), in index order: what the
        channel contract is deployed with."""
        return [g1_eip2537(v.public_key) for v in self.validators]

    def sign_shares(self, message: bytes, signers: Sequence[int]) -> dict[int, bytes]:
        """Individual signatures ``PopSchemeMPL.sign(sk_i, message)`` of ``signers``."""
        return {i: bytes(s) for i, s in self._sign(message, signers).items()}

    def _sign(self, message: bytes, signers: Sequence[int]) -> dict[int, G2Element]:
        if not isinstance(message, bytes):
            raise ValueError(f"message must be bytes, got {type(message).__name__}")
        for i in signers:
            if not 0 <= i < self.size:
                raise ValueError(f"signer index {i} out of range for {self.size} validators")
        return {i: PopSchemeMPL.sign(self.validators[i].secret_key, message) for i in signers}

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
        shares = list(self._sign(message, signers).values())
        return Attestation(signers, bytes(PopSchemeMPL.aggregate(shares)), message)
