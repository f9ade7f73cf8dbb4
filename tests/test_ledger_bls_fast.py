"""ledger.bls_fast against py-ecc's reference G2 arithmetic (RFC 9380 hash_to_curve, G2 scalar
multiplication): every fast result must be the same group element as the reference one."""

from __future__ import annotations

import random

import pytest
from py_ecc.bls import G2ProofOfPossession as bls
from py_ecc.bls.g2_primitives import G2_to_signature
from py_ecc.bls.hash_to_curve import hash_to_field_FQ2, hash_to_G2, map_to_curve_G2
from py_ecc.fields import optimized_bls12_381_FQ2 as FQ2
from py_ecc.optimized_bls12_381 import (
    G2,
    Z2,
    add,
    b2,
    curve_order,
    eq,
    field_modulus,
    is_inf,
    is_on_curve,
    multiply,
    multiply_clear_cofactor_G2,
    normalize,
)

from ledger.bls_fast import (
    ABS_X,
    BLS_X,
    PSI_C1,
    PSI_C2,
    clear_cofactor_g2,
    hash_to_g2,
    multiply_g2,
    psi,
)

MESSAGES = [b"", b"abc", b"FLCHAIN-ATTEST-v1" + bytes(range(104))]


def _map_outputs() -> list:
    """Points of E2 that are (almost surely) not in G2: single SWU-map outputs."""
    points = []
    for msg in MESSAGES[:2]:
        u0, u1 = hash_to_field_FQ2(msg, 2, bls.DST, bls.xmd_hash_function)
        points += [map_to_curve_G2(u0), map_to_curve_G2(u1)]
    return points


@pytest.fixture(scope="module")
def map_outputs() -> list:
    return _map_outputs()


@pytest.fixture(scope="module")
def g2_point():
    return hash_to_G2(b"bls-fast-test", bls.DST, bls.xmd_hash_function)


def test_parameters() -> None:
    r = BLS_X**4 - BLS_X**2 + 1
    assert r == curve_order
    assert (BLS_X - 1) ** 2 * r // 3 + BLS_X == field_modulus
    assert field_modulus % curve_order == BLS_X % curve_order
    assert curve_order < ABS_X**4 and ABS_X < 2**64
    # c1^3 and c2^2 are 1 / (1 + i)^(p - 1), a constant of the twist
    assert PSI_C1**3 == PSI_C2**2 == (FQ2((1, 1)) ** (field_modulus - 1)).inv()


def test_psi_maps_curve_to_itself(map_outputs: list) -> None:
    for p in map_outputs + [G2]:
        assert is_on_curve(psi(p), b2)
        assert not eq(psi(p), p)
    assert is_inf(psi(Z2))


def test_psi_projective_matches_affine(map_outputs: list) -> None:
    p = map_outputs[0]
    x, y = normalize(p)
    conj = lambda a: FQ2((a.coeffs[0], -a.coeffs[1]))  # noqa: E731
    assert normalize(psi(p)) == (PSI_C1 * conj(x), PSI_C2 * conj(y))


def test_psi_is_multiplication_by_x_on_g2(g2_point) -> None:
    for q in (G2, g2_point):
        assert eq(psi(q), multiply(q, BLS_X % curve_order))
        assert eq(psi(q), multiply(q, field_modulus % curve_order))
    # but not on E2 outside G2
    p = _map_outputs()[0]
    assert not eq(psi(p), multiply(p, BLS_X % curve_order))


def test_clear_cofactor_matches_reference(map_outputs: list) -> None:
    pts = map_outputs + [add(map_outputs[0], map_outputs[1])]
    for p in pts:
        fast = clear_cofactor_g2(p)
        assert eq(fast, multiply_clear_cofactor_G2(p))
        assert is_inf(multiply(fast, curve_order))


def test_hash_to_g2_matches_reference() -> None:
    for msg in MESSAGES:
        fast = hash_to_g2(msg, bls.DST, bls.xmd_hash_function)
        ref = hash_to_G2(msg, bls.DST, bls.xmd_hash_function)
        assert eq(fast, ref)
        assert normalize(fast) == normalize(ref)
    a = hash_to_g2(b"a", bls.DST, bls.xmd_hash_function)
    assert not eq(a, hash_to_G2(b"b", bls.DST, bls.xmd_hash_function))
    assert not eq(a, hash_to_G2(b"a", b"OTHER-DST", bls.xmd_hash_function))


def test_multiply_g2_matches_reference(g2_point) -> None:
    rng = random.Random(20240917)
    scalars = [1, 2, 3, ABS_X, ABS_X - 1, ABS_X**2 + 5, curve_order - 1]
    scalars += [rng.randrange(curve_order) for _ in range(5)]
    for k in scalars:
        assert eq(multiply_g2(g2_point, k), multiply(g2_point, k)), k
    assert eq(multiply_g2(G2, 12345), multiply(G2, 12345))
    # reduced modulo r, negative scalars included
    assert is_inf(multiply_g2(g2_point, 0))
    assert is_inf(multiply_g2(g2_point, curve_order))
    assert eq(multiply_g2(g2_point, curve_order + 7), multiply(g2_point, 7))
    assert eq(multiply_g2(g2_point, -1), multiply(g2_point, curve_order - 1))
    assert is_inf(multiply_g2(Z2, 987654321))


def test_fast_sign_is_byte_identical() -> None:
    msg = MESSAGES[2]
    sk = bls.KeyGen(b"\x07" * 32)
    h = hash_to_g2(msg, bls.DST, bls.xmd_hash_function)
    assert bytes(G2_to_signature(multiply_g2(h, sk))) == bytes(bls.Sign(sk, msg))
