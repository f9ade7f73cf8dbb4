"""ledger.bls_verify against py-ecc's reference BLS verification (G2ProofOfPossession).

``fast_aggregate_verify`` must return what ``bls.FastAggregateVerify`` returns on valid and
invalid input alike, ``g2_subgroup_check`` what py-ecc's ``subgroup_check`` returns on E2, and
``batch_verify`` must accept exactly the batches whose items all verify. py-ecc's verify costs
~0.3 s, so the reference is called only where the case needs it.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from py_ecc.bls import G2ProofOfPossession as bls
from py_ecc.bls.g2_primitives import (
    G1_to_pubkey,
    G2_to_signature,
    pubkey_to_G1,
    signature_to_G2,
    subgroup_check,
)
from py_ecc.bls.hash_to_curve import hash_to_field_FQ2, map_to_curve_G2
from py_ecc.fields import optimized_bls12_381_FQ as FQ
from py_ecc.optimized_bls12_381 import (
    G2,
    Z2,
    add,
    curve_order,
    field_modulus,
    is_inf,
    multiply,
    neg,
)

from ledger.bls_fast import clear_cofactor_g2, hash_to_g2, multiply_g2
from ledger.bls_verify import batch_verify, fast_aggregate_verify, g2_subgroup_check
from ledger.committee import Committee, verify_attestations

#: Cofactor of G2 in E2(Fp2): 13^2 * 23^2 * 2713 * 11953 * 262069 * (a 448-bit prime).
H2 = int(
    "5d543a95414e7f1091d50792876a202cd91de4547085abaa68a205b2e5a7ddfa628f1cb4d9e82ef21537e293"
    "a6691ae1616ec6e786f0c70cf1c38e31c7238e5",
    16,
)
SKS = [bls.KeyGen(bytes([i]) * 32) for i in range(1, 6)]
MSGS = [b"round-0", b"round-1", b"round-2"]


def _sign(sks: list[int], message: bytes) -> bytes:
    h = hash_to_g2(message, bls.DST, bls.xmd_hash_function)
    total = Z2
    for sk in sks:
        total = add(total, multiply_g2(h, sk))
    return bytes(G2_to_signature(total))


def _agree(pks: list, message: object, signature: object, expected: bool) -> None:
    assert bls.FastAggregateVerify(pks, message, signature) is expected
    assert fast_aggregate_verify(pks, message, signature) is expected


def _map_points(message: bytes) -> list:
    u0, u1 = hash_to_field_FQ2(message, 2, bls.DST, bls.xmd_hash_function)
    return [map_to_curve_G2(u0), map_to_curve_G2(u1)]


@pytest.fixture(scope="module")
def pks() -> list[bytes]:
    return [bytes(bls.SkToPk(sk)) for sk in SKS]


@pytest.fixture(scope="module")
def sig4() -> bytes:
    return _sign(SKS[:4], MSGS[0])


@pytest.fixture(scope="module")
def torsion13():
    """A point of order 13 of E2 (outside G2); E2's 13-torsion has exponent 13."""
    t = multiply(_map_points(b"torsion")[0], H2 * curve_order // 13**2)
    assert not is_inf(t) and is_inf(multiply(t, 13))
    return t


def test_valid_signatures_agree(pks: list[bytes], sig4: bytes) -> None:
    _agree(pks[:4], MSGS[0], sig4, True)
    _agree(pks[2:3], MSGS[1], _sign(SKS[2:3], MSGS[1]), True)
    assert fast_aggregate_verify(pks[:4][::-1], MSGS[0], sig4)
    assert fast_aggregate_verify(pks[:4], MSGS[0], sig4, trusted_keys=frozenset(pks))


def test_wrong_message_or_key_set(pks: list[bytes], sig4: bytes) -> None:
    _agree(pks[:4], MSGS[1], sig4, False)
    _agree(pks[:3], MSGS[0], sig4, False)  # a signer missing
    _agree(pks[:5], MSGS[0], sig4, False)  # an extra key
    assert not fast_aggregate_verify(pks[:4] + pks[:1], MSGS[0], sig4)  # a key twice


def test_tampered_signature_bytes(pks: list[bytes], sig4: bytes) -> None:
    flipped = sig4[:-1] + bytes([sig4[-1] ^ 1])  # another x: off the curve or off G2
    _agree(pks[:4], MSGS[0], flipped, False)
    negated = bytes([sig4[0] ^ 0x20]) + sig4[1:]  # a_flag: the point -sigma, in G2
    assert subgroup_check(signature_to_G2(negated))
    _agree(pks[:4], MSGS[0], negated, False)
    for bad in (bytes([sig4[0] & 0x7F]) + sig4[1:], bytes([sig4[0] | 0x40]) + sig4[1:]):
        _agree(pks[:4], MSGS[0], bad, False)  # c_flag cleared / b_flag set


def test_signature_on_curve_but_not_in_g2(pks: list[bytes], sig4: bytes, torsion13) -> None:
    outside = bytes(G2_to_signature(_map_points(b"not-in-g2")[0]))
    assert not subgroup_check(signature_to_G2(outside))
    _agree(pks[:4], MSGS[0], outside, False)
    mauled = bytes(G2_to_signature(add(signature_to_G2(sig4), torsion13)))
    assert not subgroup_check(signature_to_G2(mauled))
    _agree(pks[:4], MSGS[0], mauled, False)


def test_infinity_signature(pks: list[bytes]) -> None:
    infinity = bytes(G2_to_signature(Z2))
    assert infinity == b"\xc0" + bytes(95)
    _agree(pks[:4], MSGS[0], infinity, False)


def test_malformed_input(pks: list[bytes], sig4: bytes) -> None:
    for args in [
        ([], MSGS[0], sig4),  # empty key list
        (pks[:4], MSGS[0], bytes(96)),  # c_flag missing
        (pks[:4], MSGS[0], random.Random(5).randbytes(96)),
        (pks[:4], MSGS[0], b"\xff" * 96),
        (pks[:4], MSGS[0], sig4[:95]),
        (pks[:4], MSGS[0], bytearray(sig4)),
        (pks[:4], MSGS[0].decode(), sig4),
        ([bytearray(pks[0])] + pks[1:4], MSGS[0], sig4),
        ([pks[0][:47]] + pks[1:4], MSGS[0], sig4),
        ([pks[0].hex()] + pks[1:4], MSGS[0], sig4),
    ]:
        _agree(*args, False)
    # py-ecc raises TypeError on these; ours returns False.
    with pytest.raises(TypeError):
        bls.FastAggregateVerify(iter(pks[:4]), MSGS[0], sig4)
    assert fast_aggregate_verify(iter(pks[:4]), MSGS[0], sig4) is False  # type: ignore[arg-type]
    assert fast_aggregate_verify(None, MSGS[0], sig4) is False  # type: ignore[arg-type]
    assert fast_aggregate_verify([None], MSGS[0], sig4) is False  # type: ignore[list-item]


def test_invalid_pubkeys(pks: list[bytes], sig4: bytes) -> None:
    q = field_modulus
    x_on = next(x for x in range(1, 100) if pow(x**3 + 4, (q - 1) // 2, q) == 1)
    x_off = next(x for x in range(1, 100) if pow(x**3 + 4, (q - 1) // 2, q) != 1)
    y_on = pow(x_on**3 + 4, (q + 1) // 4, q)
    not_in_g1 = bytes(G1_to_pubkey((FQ(x_on), FQ(y_on), FQ(1))))  # on E1, outside G1
    not_on_curve = (x_off | 1 << 383).to_bytes(48, "big")
    infinity = b"\xc0" + bytes(47)
    for bad in (not_in_g1, not_on_curve, infinity, b"\xff" * 48):
        assert not bls.KeyValidate(bad)
        _agree([bad] + pks[1:4], MSGS[0], sig4, False)
    # Two valid keys that add up to infinity: py-ecc rejects the aggregate key.
    minus = bytes(G1_to_pubkey(neg(pubkey_to_G1(pks[0]))))
    assert bls.KeyValidate(minus)
    _agree([pks[0], minus], MSGS[0], sig4, False)


def test_g2_subgroup_check_agrees_with_py_ecc(torsion13) -> None:
    maps = _map_points(b"abc") + _map_points(b"")
    h = hash_to_g2(b"subgroup", bls.DST, bls.xmd_hash_function)
    inside = [Z2, G2, multiply(G2, 5), h, clear_cofactor_g2(maps[0])]
    outside = maps + [add(maps[0], G2), torsion13, add(h, torsion13)]
    outside.append(multiply(maps[1], curve_order))  # cofactor part only
    for point, expected in [(p, True) for p in inside] + [(p, False) for p in outside]:
        assert subgroup_check(point) is expected
        assert g2_subgroup_check(point) is expected


def test_g2_subgroup_check_small_torsion() -> None:
    p = _map_points(b"small torsion")[1]
    for part, order in [(13**2, 13), (23**2, 23), (13**2 * 23**2, 13 * 23), (2713, 2713)]:
        t = multiply(p, H2 * curve_order // part)  # the point's component of that order
        assert not is_inf(t) and is_inf(multiply(t, order))
        assert not g2_subgroup_check(t)
        assert not g2_subgroup_check(add(t, G2))


@pytest.fixture(scope="module")
def batch(pks: list[bytes]) -> list[tuple[list[bytes], bytes, bytes]]:
    signers = [[0, 1, 2, 3], [1], [0, 2, 4]]
    return [
        ([pks[i] for i in s], m, _sign([SKS[i] for i in s], m))
        for s, m in zip(signers, MSGS, strict=True)
    ]


def test_batch_verify_valid(batch: list, pks: list[bytes]) -> None:
    assert batch_verify(batch, rng=random.Random(1))
    assert batch_verify(batch[:1])
    assert batch_verify([])
    same_message = [(pks[:2], MSGS[0], _sign(SKS[:2], MSGS[0])), (pks[3:4], MSGS[0],
                    _sign(SKS[3:4], MSGS[0]))]
    assert batch_verify(same_message)
    assert not batch_verify(same_message + [(pks[4:5], MSGS[0], same_message[0][2])])


@pytest.mark.parametrize("pos", [0, 1, 2])
def test_batch_verify_one_bad_item(batch: list, pos: int, torsion13) -> None:
    rng = random.Random(pos)
    keys, msg, sig = batch[pos]
    wrong_msg = list(batch)
    wrong_msg[pos] = (keys, b"other", sig)
    assert not batch_verify(wrong_msg, rng=rng)
    off_g2 = list(batch)
    off_g2[pos] = (keys, msg, bytes(G2_to_signature(add(signature_to_G2(sig), torsion13))))
    assert not batch_verify(off_g2, rng=rng)
    malformed = list(batch)
    malformed[pos] = (keys[:0], msg, sig)
    assert not batch_verify(malformed)


def test_batch_randomizers_stop_cancelling_forgeries(batch: list) -> None:
    # sigma_0 + D and sigma_1 - D: both items are invalid but their product check passes.
    d = hash_to_g2(b"offset", bls.DST, bls.xmd_hash_function)
    (k0, m0, s0), (k1, m1, s1) = batch[:2]
    forged = [
        (k0, m0, bytes(G2_to_signature(add(signature_to_G2(s0), d)))),
        (k1, m1, bytes(G2_to_signature(add(signature_to_G2(s1), neg(d))))),
    ]
    assert not fast_aggregate_verify(*forged[0])

    class Ones(random.Random):
        def randrange(self, *args: object, **kwargs: object) -> int:
            return 1

    assert batch_verify(forged, rng=Ones())  # no randomizers: fooled
    assert not batch_verify(forged)


def test_verify_attestations_batch_and_fallback() -> None:
    committee = Committee.from_seed("bls-verify", size=4)
    info = committee.public_info()
    atts = [committee.attest(m) for m in MSGS]
    atts[1] = committee.attest(MSGS[1], approve=[True, False, True, True])
    pairs = [(a, a.message) for a in atts]
    assert verify_attestations(info, pairs) == [True, True, True]
    bad_sig = replace(atts[1], signature=atts[2].signature)
    pairs[1] = (bad_sig, bad_sig.message)
    assert verify_attestations(info, pairs + [None, (atts[0], MSGS[1])]) == [  # type: ignore[list-item]
        True, False, True, False, False
    ]
    assert verify_attestations(info, []) == []
