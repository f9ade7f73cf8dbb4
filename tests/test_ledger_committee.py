"""FLChain edge-validator committee (Majeed & Hong 2019) with BLS proof-of-possession signatures
(draft-irtf-cfrg-bls-signature). Pairings in py-ecc are slow (~0.3 s per verify), so committees
are small and built once per module.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest
from py_ecc.bls import G2ProofOfPossession as bls

from ledger.committee import (
    Attestation,
    Committee,
    QuorumError,
    attestation_message,
    default_quorum,
    verify_attestation,
    verify_registration,
)

CHANNEL = hashlib.sha256(b"channel-0").digest()
GLOBAL = hashlib.sha256(b"global-model-round-7").digest()
ROOT = hashlib.sha256(b"merkle-root-round-7").digest()
MSG = attestation_message(CHANNEL, 7, GLOBAL, ROOT)


@pytest.fixture(scope="module")
def committee() -> Committee:
    return Committee.from_seed(1234, size=4)


@pytest.fixture(scope="module")
def attestation(committee: Committee) -> Attestation:
    return committee.attest(MSG)


def test_attestation_message_layout() -> None:
    assert len(MSG) == 17 + 32 + 8 + 32 + 32 == 121
    assert MSG[:17] == b"FLCHAIN-ATTEST-v1"
    assert MSG[49:57] == b"\x00\x00\x00\x00\x00\x00\x00\x07"
    assert MSG == b"FLCHAIN-ATTEST-v1" + CHANNEL + (7).to_bytes(8, "big") + GLOBAL + ROOT
    with pytest.raises(ValueError, match="channel_id must be 32 bytes, got 31"):
        attestation_message(CHANNEL[:31], 7, GLOBAL, ROOT)
    with pytest.raises(ValueError, match="merkle_root must be 32 bytes, got 33"):
        attestation_message(CHANNEL, 7, GLOBAL, ROOT + b"x")
    with pytest.raises(ValueError, match="rnd"):
        attestation_message(CHANNEL, -1, GLOBAL, ROOT)


def test_default_quorum() -> None:
    assert [default_quorum(n) for n in (1, 2, 3, 4, 5, 6, 7)] == [1, 2, 3, 3, 4, 5, 5]


def test_keys_deterministic_from_seed(committee: Committee) -> None:
    sk0 = bls.KeyGen(hashlib.sha256(b"flchain-committee:1234:0").digest())
    assert committee.validators[0].secret_key == sk0
    assert committee.validators[0].public_key == bls.SkToPk(sk0)
    assert len(committee.validators[0].public_key) == 48
    assert len(committee.validators[0].pop) == 96
    again = Committee.from_seed(1234, size=1)
    assert again.validators[0] == committee.validators[0]
    other = Committee.from_seed(1235, size=1)
    assert other.validators[0].public_key != committee.validators[0].public_key
    assert len({v.public_key for v in committee.validators}) == 4
    assert "secret_key" not in repr(committee.validators[0])


def test_size_and_quorum_validation() -> None:
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        Committee.from_seed(1, size=0)


def test_public_info_is_json_without_secrets(committee: Committee) -> None:
    info = committee.public_info()
    assert json.loads(json.dumps(info)) == info
    assert [e["index"] for e in info] == [0, 1, 2, 3]
    assert info[2]["pubkey"] == committee.validators[2].public_key.hex()
    assert len(info[2]["pop"]) == 192
    assert str(committee.validators[2].secret_key) not in json.dumps(info)


def test_shares_identical_to_bls_sign(committee: Committee, attestation: Attestation) -> None:
    shares = committee.sign_shares(MSG, range(4))
    reference = [bls.Sign(v.secret_key, MSG) for v in committee.validators]
    for i in range(4):
        assert shares[i] == reference[i]
    assert attestation.signers == (0, 1, 2, 3)
    assert attestation.signature == bls.Aggregate(reference)
    assert bls.FastAggregateVerify(
        [v.public_key for v in committee.validators], MSG, attestation.signature
    )


def test_verify_true_and_tampered_message(committee: Committee, attestation: Attestation) -> None:
    info = committee.public_info()
    assert verify_attestation(info, attestation, MSG)
    other = attestation_message(CHANNEL, 8, GLOBAL, ROOT)
    forged = replace(attestation, message=other)
    assert not verify_attestation(info, forged, other)
    # The message handed in must match the one the attestation carries.
    assert not verify_attestation(info, attestation, other)


def test_wrong_committee_fails(attestation: Attestation) -> None:
    stranger = Committee.from_seed("someone-else", size=4)
    assert not verify_attestation(stranger.public_info(), attestation, MSG)


def test_quorum_error(committee: Committee) -> None:
    assert committee.quorum == 3
    with pytest.raises(QuorumError, match="only 2 of 4 validators approved; quorum needs 3"):
        committee.attest(MSG, approve=[True, False, True, False])
    with pytest.raises(ValueError, match="approve has 3 entries for 4 validators"):
        committee.attest(MSG, approve=[True, True, True])
    lenient = Committee(committee.validators, quorum=2)
    assert lenient.attest(MSG, approve=[True, False, True, False]).signers == (0, 2)
    with pytest.raises(ValueError, match=r"quorum must be in \[1, 4\], got 5"):
        Committee(committee.validators, quorum=5)


def test_disagreeing_validator_excluded(committee: Committee) -> None:
    att = committee.attest(MSG, approve=[True, True, False, True])
    assert att.signers == (0, 1, 3)
    shares = committee.sign_shares(MSG, (0, 1, 3))
    assert att.signature == bls.Aggregate([shares[0], shares[1], shares[3]])
    info = committee.public_info()
    assert verify_attestation(info, att, MSG)
    # Below the verifier's quorum, or claiming a signer that did not sign -> rejected.
    assert not verify_attestation(info, att, MSG, quorum=4)
    assert not verify_attestation(info, replace(att, signers=(0, 1, 2)), MSG)


def test_structural_rejections_without_pairing(
    committee: Committee, attestation: Attestation
) -> None:
    info = committee.public_info()
    bad = [
        replace(attestation, signers=(0, 1, 2, 4)),  # out of range
        replace(attestation, signers=(0, 1)),  # below quorum
        replace(attestation, signers=(1, 0, 2, 3)),  # not increasing
        replace(attestation, signature=attestation.signature[:95]),
        replace(attestation, signature=b"\xff" * 96),  # not a curve point
    ]
    for att in bad:
        assert verify_attestation(info, att, MSG) is False
    assert verify_attestation([{"index": 0}], attestation, MSG) is False
    assert verify_attestation(info[1:], attestation, MSG) is False


def test_repeated_signer_cannot_forge_quorum(committee: Committee) -> None:
    # Validator 0 alone: 3 * sig_0 verifies under pk_0 + pk_0 + pk_0 in plain BLS.
    share = committee.sign_shares(MSG, [0])[0]
    tripled = bls.Aggregate([share, share, share])
    pk0 = committee.validators[0].public_key
    assert bls.FastAggregateVerify([pk0, pk0, pk0], MSG, tripled)
    forged = Attestation((0, 0, 0), tripled, MSG)
    assert not verify_attestation(committee.public_info(), forged, MSG)


def test_attestation_dict_round_trip(attestation: Attestation) -> None:
    d = attestation.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert Attestation.from_dict(d) == attestation
    assert attestation.hash() == hashlib.sha256(attestation.signature).digest()
    with pytest.raises(ValueError, match="signature must be 96 bytes, got 95"):
        Attestation.from_dict({**d, "signature": d["signature"][:190]})


def test_registration_detects_swapped_pubkey(committee: Committee) -> None:
    info = committee.public_info()
    assert verify_registration(info[:2]) == []
    stranger = Committee.from_seed("rogue", size=1).public_info()[0]
    swapped = [dict(info[0]), dict(info[1])]
    swapped[1]["pubkey"] = stranger["pubkey"]  # keeps validator 1's PoP
    assert verify_registration(swapped) == [1]
    swapped[0]["pop"] = "zz"
    assert verify_registration(swapped) == [0, 1]
