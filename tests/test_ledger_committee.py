"""FLChain edge-validator committee (Majeed & Hong 2019) on blspy: BLS proof-of-possession
signatures of draft-irtf-cfrg-bls-signature, ciphersuite
BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_.

py-ecc's ``G2ProofOfPossession`` is kept only as a reference here: keys, proofs of possession and
signatures must be byte-identical to it and to the Ethereum consensus-spec BLS vectors (same
ciphersuite).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace

import pytest
from blspy import G2Element, PopSchemeMPL
from py_ecc.bls import G2ProofOfPossession as bls

from ledger.attestation import (
    Attestation,
    default_quorum,
    verify_attestation,
    verify_attestations,
    verify_registration,
)
from ledger.commitment import g2_compress_eip2537
from ledger.committee import Committee, QuorumError, Validator, keygen

MSG = hashlib.sha256(b"commitment of round 7").digest()
OTHER = hashlib.sha256(b"commitment of round 8").digest()

#: consensus-specs BLS "sign" vectors (tests/generators/bls): (secret key, message, signature).
SIGN_VECTORS = [
    (
        "263dbd792f5b1be47ed85f8938c0f29586af0d3ac7b977f21c278fe1462040e3",
        "00" * 32,
        "b6ed936746e01f8ecf281f020953fbf1f01debd5657c4a383940b020b26507f6076334f91e2366c96e9ab279"
        "fb5158090352ea1c5b0c9274504f4f0e7053af24802e51e4568d164fe986834f41e55c8e850ce1f98458c0cf"
        "c9ab380b55285a55",
    ),
    (
        "47b8192d77bf871b62e87859d653922725724a5c031afeabc60bcef5ff665138",
        "56" * 32,
        "af1390c3c47acdb37131a51216da683c509fce0e954328a59f93aebda7e4ff974ba208d9a4a2a2389f892a9d"
        "418d618418dd7f7a6bc7aa0da999a9d3a5b815bc085e14fd001f6a1948768a3f4afefc8b8240dda329f984cb"
        "345c6363272ba4fe",
    ),
]
#: the public key of the first vector's secret key (consensus-specs / go-ethereum tests).
PUBKEY_VECTOR = (
    "a491d1b0ecd9bb917989f0e74f0dea0422eac4a873e5e2644f368dff"
    "b9a6e20fd6e10c1b77654d067c0618f6e5a7f79a"
)


@pytest.fixture(scope="module")
def committee() -> Committee:
    return Committee.from_seed(1234, size=4)


@pytest.fixture(scope="module")
def attestation(committee: Committee) -> Attestation:
    return committee.attest(MSG)


def _ikm(seed: object, i: int) -> bytes:
    return hashlib.sha256(f"flchain-committee:{seed}:{i}".encode()).digest()


def test_default_quorum() -> None:
    assert [default_quorum(n) for n in (1, 2, 3, 4, 5, 6, 7)] == [1, 2, 3, 3, 4, 5, 5]


def test_keygen_is_the_drafts_keygen() -> None:
    for ikm in [_ikm(1234, 0), _ikm("x", 3), bytes(32), b"\xff" * 40]:
        assert keygen(ikm) == bls.KeyGen(ikm)
    assert keygen(bytes(32), b"info") == bls.KeyGen(bytes(32), b"info")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        keygen(bytes(31))


def test_known_answer_vectors() -> None:
    for sk, msg, sig in SIGN_VECTORS:
        v = Validator.from_secret(0, int(sk, 16))
        assert Committee([v], quorum=1).sign_shares(bytes.fromhex(msg), [0])[0].hex() == sig
    assert Validator.from_secret(0, int(SIGN_VECTORS[0][0], 16)).public_key.hex() == PUBKEY_VECTOR


def test_keys_and_signatures_match_py_ecc(committee: Committee, attestation: Attestation) -> None:
    reference_sks = [bls.KeyGen(_ikm(1234, i)) for i in range(4)]
    for v, sk in zip(committee.validators, reference_sks, strict=True):
        assert v.public_key == bls.SkToPk(sk)
        assert v.pop == bls.PopProve(sk)
    shares = committee.sign_shares(MSG, range(4))
    reference = [bls.Sign(sk, MSG) for sk in reference_sks]
    assert [shares[i] for i in range(4)] == reference
    assert attestation.signers == (0, 1, 2, 3)
    assert attestation.signature == bls.Aggregate(reference)
    pubkeys = [v.public_key for v in committee.validators]
    assert bls.FastAggregateVerify(pubkeys, MSG, attestation.signature)


def test_keys_deterministic_from_seed(committee: Committee) -> None:
    again = Committee.from_seed(1234, size=1)
    assert again.validators[0] == committee.validators[0]
    other = Committee.from_seed(1235, size=1)
    assert other.validators[0].public_key != committee.validators[0].public_key
    assert len({v.public_key for v in committee.validators}) == 4
    assert "secret_key" not in repr(committee.validators[0])
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        Committee.from_seed(1, size=0)


def test_public_info_and_eip2537_keys(committee: Committee) -> None:
    info = committee.public_info()
    assert json.loads(json.dumps(info)) == info
    assert [e["index"] for e in info] == [0, 1, 2, 3]
    assert info[2]["pubkey"] == committee.validators[2].public_key.hex()
    assert len(info[2]["pop"]) == 192
    keys = committee.pubkeys_eip2537()
    assert len(keys) == 4 and all(len(k) == 128 and k[:16] == bytes(16) for k in keys)
    assert len(set(keys)) == 4


def test_verify_true_and_tampered_message(committee: Committee, attestation: Attestation) -> None:
    info = committee.public_info()
    assert verify_attestation(info, attestation, MSG)
    forged = replace(attestation, message=OTHER)
    assert not verify_attestation(info, forged, OTHER)
    assert not verify_attestation(info, attestation, OTHER)  # must match the carried message


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
    with pytest.raises(ValueError, match="out of range"):
        committee.sign_shares(MSG, [4])


def test_disagreeing_validator_excluded(committee: Committee) -> None:
    att = committee.attest(MSG, approve=[True, True, False, True])
    assert att.signers == (0, 1, 3) and att.bitmap() == 0b1011
    shares = committee.sign_shares(MSG, (0, 1, 3))
    assert att.signature == bls.Aggregate([shares[0], shares[1], shares[3]])
    info = committee.public_info()
    assert verify_attestation(info, att, MSG)
    assert not verify_attestation(info, att, MSG, quorum=4)  # below the verifier's quorum
    assert not verify_attestation(info, replace(att, signers=(0, 1, 2)), MSG)  # 2 did not sign


def test_structural_rejections(committee: Committee, attestation: Attestation) -> None:
    info = committee.public_info()
    bad = [
        replace(attestation, signers=(0, 1, 2, 4)),  # out of range
        replace(attestation, signers=(0, 1)),  # below quorum
        replace(attestation, signers=(1, 0, 2, 3)),  # not increasing
        replace(attestation, signers=(-1, 1, 2, 3)),
        replace(attestation, signature=attestation.signature[:95]),
        replace(attestation, signature=b"\xff" * 96),  # not a curve point
        replace(attestation, message="text"),
    ]
    for att in bad:
        assert verify_attestation(info, att, MSG) is False
    assert verify_attestation([{"index": 0}], attestation, MSG) is False
    assert verify_attestation(info[1:], attestation, MSG) is False
    assert verify_attestation([{**info[0], "pubkey": "zz"}, *info[1:]], attestation, MSG) is False


def test_repeated_signer_cannot_forge_quorum(committee: Committee) -> None:
    # Validator 0 alone: 3 * sig_0 verifies under pk_0 + pk_0 + pk_0 in plain BLS.
    share = committee.sign_shares(MSG, [0])[0]
    tripled = bls.Aggregate([share, share, share])
    pk0 = committee.validators[0].public_key
    assert bls.FastAggregateVerify([pk0, pk0, pk0], MSG, tripled)
    forged = Attestation((0, 0, 0), tripled, MSG)
    assert not verify_attestation(committee.public_info(), forged, MSG)


def test_attestation_forms(attestation: Attestation) -> None:
    d = attestation.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert Attestation.from_dict(d) == attestation
    assert attestation.hash() == hashlib.sha256(attestation.signature).digest()
    with pytest.raises(ValueError, match="signature must be 96 bytes, got 95"):
        Attestation.from_dict({**d, "signature": d["signature"][:190]})
    with pytest.raises(KeyError):
        Attestation.from_dict({"signers": [0]})
    with pytest.raises(ValueError):
        Attestation.from_dict({**d, "message": "xyz"})
    assert attestation.bitmap() == 0b1111
    again = Attestation.from_bitmap(0b1111, attestation.signature, MSG)
    assert again == attestation
    assert Attestation.from_bitmap(0b10100, attestation.signature, MSG).signers == (2, 4)
    with pytest.raises(ValueError, match="bitmap"):
        Attestation.from_bitmap(-1, attestation.signature, MSG)
    eip = attestation.signature_eip2537()
    assert len(eip) == 256 and g2_compress_eip2537(eip) == attestation.signature


def test_registration_detects_bad_proofs(committee: Committee) -> None:
    info = committee.public_info()
    assert verify_registration(info) == []
    stranger = Committee.from_seed("rogue", size=1).public_info()[0]
    swapped = [dict(e) for e in info]
    swapped[1]["pubkey"] = stranger["pubkey"]  # keeps validator 1's PoP
    swapped[2]["pop"] = info[3]["pop"]  # another validator's proof
    swapped[3]["pubkey"] = "c0" + "00" * 47  # the identity: no proof can hold
    assert verify_registration(swapped) == [1, 2, 3]
    swapped[0]["pop"] = "zz"
    assert verify_registration(swapped) == [0, 1, 2, 3]
    assert verify_registration([{**info[0], "index": 1}]) == [0]


def test_batch_verification_finds_the_bad_round(committee: Committee) -> None:
    info = committee.public_info()
    msgs = [hashlib.sha256(b"round %d" % r).digest() for r in range(6)]
    atts = [committee.attest(m, approve=[True, r % 2 == 0, True, True]) for r, m in enumerate(msgs)]
    items = list(zip(atts, msgs, strict=True))
    assert verify_attestations(info, items) == [True] * 6
    bad = list(items)
    bad[2] = (replace(atts[2], signature=atts[3].signature), msgs[2])  # another round's signature
    bad[4] = (atts[4], msgs[5])  # message mismatch (structural)
    assert verify_attestations(info, bad) == [True, True, False, True, False, True]
    assert verify_attestations(info, [items[0], items[0]]) == [True, True]  # same message twice
    assert verify_attestations(info, items[:1]) == [True]
    assert verify_attestations([], items[:2]) == [False, False]


def test_batch_does_not_pin_each_signature(committee: Committee) -> None:
    """Documented limit of the unweighted batch: moving D from one round's signature to
    another's keeps the sum, so the batch accepts both while each fails alone."""
    info = committee.public_info()
    a, b = committee.attest(MSG), committee.attest(OTHER)
    delta = G2Element.from_bytes(committee.sign_shares(b"anything", [0])[0])
    a2 = replace(a, signature=bytes(G2Element.from_bytes(a.signature) + delta))
    b2 = replace(b, signature=bytes(G2Element.from_bytes(b.signature) + delta.negate()))
    assert verify_attestations(info, [(a2, MSG), (b2, OTHER)]) == [True, True]
    assert not verify_attestation(info, a2, MSG) and not verify_attestation(info, b2, OTHER)


def test_timings(committee: Committee) -> None:
    """Speed of blspy signing and verification (printed, not asserted)."""
    info = committee.public_info()
    n = 200
    msgs = [hashlib.sha256(b"timing %d" % r).digest() for r in range(n)]
    t0 = time.perf_counter()
    atts = [committee.attest(m) for m in msgs]
    t1 = time.perf_counter()
    single = [verify_attestation(info, a, m) for a, m in zip(atts, msgs, strict=True)]
    t2 = time.perf_counter()
    batch = verify_attestations(info, list(zip(atts, msgs, strict=True)))
    t3 = time.perf_counter()
    share = committee.validators[0].secret_key
    for m in msgs:
        PopSchemeMPL.sign(share, m)
    t4 = time.perf_counter()
    verify_registration(info)
    t5 = time.perf_counter()
    assert all(single) and all(batch)
    print(
        f"\nblspy per round ({committee.size} validators): share {(t4 - t3) / n * 1e3:.2f} ms, "
        f"attest {(t1 - t0) / n * 1e3:.2f} ms, verify {(t2 - t1) / n * 1e3:.2f} ms, "
        f"batch verify {(t3 - t2) / n * 1e3:.2f} ms; PoP check {(t5 - t4) / 4 * 1e3:.2f} ms"
    )
