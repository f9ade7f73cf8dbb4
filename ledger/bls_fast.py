"""Faster BLS12-381 G2 arithmetic for signing, in pure Python on top of py-ecc.

py-ecc's ``G2ProofOfPossession.Sign`` spends most of its time in two plain double-and-add
scalar multiplications on G2: clearing the cofactor of the hashed point (by the 636-bit
``H_EFF_G2``) and multiplying by the 255-bit secret key. Both can use the endomorphism
``psi`` of the G2 curve E2 (the "untwist-Frobenius-twist" map of Galbraith and Scott):

* :func:`clear_cofactor_g2` is the Budroni-Pintore method of RFC 9380, Appendix G.3
  (A. Budroni and F. Pintore, "Efficient hash maps to G2 on BLS curves", Applicable Algebra in
  Engineering, Communication and Computing, 2020; ePrint 2017/419). It computes exactly
  ``[H_EFF_G2]P`` with two multiplications by the 64-bit BLS parameter ``|x|`` and three ``psi``.
* :func:`multiply_g2` is a GLS scalar multiplication (S. D. Galbraith, X. Lin and M. Scott,
  "Endomorphisms for faster elliptic curve cryptography on a large class of curves",
  EUROCRYPT 2009): on G2 ``psi`` acts as multiplication by ``p = x (mod r)``, so a scalar is
  written in base ``|x|`` with four 64-bit digits and the four products are interleaved
  (Straus-Shamir), sharing 64 doublings instead of 255.

Everything is exact group arithmetic: the points equal those of py-ecc's reference functions
(:func:`py_ecc.optimized_bls12_381.eq`), so signatures serialise to the same bytes. Points are
py-ecc's optimized G2 points, homogeneous projective ``(X, Y, Z)`` over ``FQ2 = Fp[i]/(i^2+1)``;
the curve formulas are py-ecc's ``add``/``double``/``neg``. Nothing here is constant-time
(neither is py-ecc); it is meant for the simulator, not for protecting keys from side channels.
"""

from __future__ import annotations

from py_ecc.bls.hash_to_curve import hash_to_field_FQ2, map_to_curve_G2
from py_ecc.fields import optimized_bls12_381_FQ2 as FQ2
from py_ecc.optimized_bls12_381 import Z2, add, curve_order, double, field_modulus, neg
from py_ecc.typing import Optimized_Point3D

G2Point = Optimized_Point3D[FQ2]

#: The BLS parameter ``x`` of BLS12-381 (negative); ``p = (x - 1)^2 (x^4 - x^2 + 1) / 3 + x``.
BLS_X = -0xD201000000010000
#: ``|x|``, the 64-bit value the multiplications below actually use.
ABS_X = -BLS_X
_ABS_X_BITS = bin(ABS_X)[3:]  # bits below the leading one, most significant first

# psi constants (RFC 9380, Appendix G.3): c1 = 1 / (1 + i)^((p - 1) / 3),
# c2 = 1 / (1 + i)^((p - 1) / 2).
_ONE_PLUS_I = FQ2((1, 1))
PSI_C1: FQ2 = (_ONE_PLUS_I ** ((field_modulus - 1) // 3)).inv()
PSI_C2: FQ2 = (_ONE_PLUS_I ** ((field_modulus - 1) // 2)).inv()


def _conj(a: FQ2) -> FQ2:
    """Frobenius on ``FQ2``: ``a0 + a1 i -> a0 - a1 i`` (that is, ``a^p``)."""
    c0, c1 = a.coeffs
    return FQ2((c0, -c1))


def psi(point: G2Point) -> G2Point:
    """The endomorphism ``psi(x, y) = (c1 * x^p, c2 * y^p)`` of E2 (RFC 9380, Appendix G.3).

    In homogeneous projective coordinates ``x = X/Z`` and ``x^p = X^p / Z^p``, so the map is
    ``(X, Y, Z) -> (c1 * conj(X), c2 * conj(Y), conj(Z))``; the point at infinity stays there.
    On G2, ``psi(Q) = [p]Q = [x mod r]Q``.

    Parameters
    ----------
    point : tuple of FQ2
        A projective point of E2: ``y^2 = x^3 + 4(1 + i)``.

    Returns
    -------
    tuple of FQ2
        ``psi(point)``, again projective.
    """
    x, y, z = point
    return (PSI_C1 * _conj(x), PSI_C2 * _conj(y), _conj(z))


def _times_abs_x(point: G2Point) -> G2Point:
    """``[|x|]point`` by left-to-right double-and-add (63 doublings, 5 additions)."""
    acc = point
    for bit in _ABS_X_BITS:
        acc = double(acc)
        if bit == "1":
            acc = add(acc, point)
    return acc


def _times_x(point: G2Point) -> G2Point:
    """``[x]point`` for the negative BLS parameter ``x``: ``-[|x|]point``."""
    return neg(_times_abs_x(point))


def clear_cofactor_g2(point: G2Point) -> G2Point:
    """``[H_EFF_G2]point`` by the Budroni-Pintore method (RFC 9380, Appendix G.3).

    ``h_eff = x^2 - x - 1 + (x - 1) psi + 2 psi^2`` as an endomorphism, evaluated as::

        t1 = [x]P; t2 = psi(P); t3 = psi(psi([2]P))
        t3 = t3 - t2; t2 = t1 + t2; t2 = [x]t2; t3 = t3 + t2; t3 = t3 - t1
        Q = t3 - P

    The result equals py-ecc's ``multiply_clear_cofactor_G2(point)`` (``multiply`` by
    ``H_EFF_G2``) as a point, for any point of E2, not only those of G2.

    Parameters
    ----------
    point : tuple of FQ2
        A projective point of E2 (e.g. a ``map_to_curve_G2`` output).

    Returns
    -------
    tuple of FQ2
        A point of the prime-order subgroup G2.
    """
    t1 = _times_x(point)
    t2 = psi(point)
    t3 = psi(psi(double(point)))
    t3 = add(t3, neg(t2))
    t2 = add(t1, t2)
    t2 = _times_x(t2)
    t3 = add(t3, t2)
    t3 = add(t3, neg(t1))
    return add(t3, neg(point))


def hash_to_g2(message: bytes, dst: bytes, hash_function: object) -> G2Point:
    """``hash_to_curve`` for ``BLS12381G2_XMD:SHA-256_SSWU_RO_`` (RFC 9380, Section 3).

    Same pipeline as py-ecc's ``hash_to_G2`` (``hash_to_field`` with ``expand_message_xmd``,
    simplified SWU map to the 3-isogenous curve and the isogeny, point addition) but with
    :func:`clear_cofactor_g2` in place of the 636-bit scalar multiplication; the output
    equals ``hash_to_G2(message, dst, hash_function)`` as a point.

    Parameters
    ----------
    message : bytes
        Message to hash.
    dst : bytes
        Domain separation tag, e.g. ``G2ProofOfPossession.DST``.
    hash_function
        The hash constructor for ``expand_message_xmd``, e.g.
        ``G2ProofOfPossession.xmd_hash_function`` (``hashlib.sha256``).

    Returns
    -------
    tuple of FQ2
        The projective point of G2.
    """
    u0, u1 = hash_to_field_FQ2(message, 2, dst, hash_function)
    return clear_cofactor_g2(add(map_to_curve_G2(u0), map_to_curve_G2(u1)))


def multiply_g2(point: G2Point, scalar: int) -> G2Point:
    """``[scalar]point`` for ``point`` in G2, by GLS decomposition with ``psi``.

    With ``k = scalar mod r = d0 + d1 |x| + d2 |x|^2 + d3 |x|^3`` (``0 <= d_i < |x| < 2^64``,
    possible because ``r = x^4 - x^2 + 1 < |x|^4``) and ``[|x|]Q = -psi(Q)`` on G2,
    ``[k]Q = sum_i [d_i] Q_i`` with ``Q_i = (-1)^i psi^i(Q)``. The 16 subset sums of
    ``Q_0..Q_3`` are precomputed (11 additions) and the four digits are scanned together,
    most significant bit first: one doubling per bit and at most one table addition.

    Parameters
    ----------
    point : tuple of FQ2
        A projective point of the order-``r`` subgroup G2 (e.g. a :func:`hash_to_g2` output).
        For points outside G2 the result is wrong, since ``psi`` is then not ``[x]``.
    scalar : int
        Any integer; it is reduced modulo the group order ``r``.

    Returns
    -------
    tuple of FQ2
        A projective point equal to py-ecc's ``multiply(point, scalar % r)``.
    """
    k = scalar % curve_order
    if k == 0:
        return Z2
    digits = []
    for _ in range(4):
        k, d = divmod(k, ABS_X)
        digits.append(d)
    p1 = psi(point)
    p2 = psi(p1)
    p3 = psi(p2)
    base = (point, neg(p1), p2, neg(p3))
    table: list[G2Point] = [Z2] * 16
    for mask in range(1, 16):
        low = (mask & -mask).bit_length() - 1
        rest = mask & (mask - 1)
        table[mask] = base[low] if rest == 0 else add(table[rest], base[low])
    d0, d1, d2, d3 = digits
    acc: G2Point | None = None
    for bit in range(max(d.bit_length() for d in digits) - 1, -1, -1):
        idx = ((d0 >> bit) & 1) | ((d1 >> bit) & 1) << 1 | ((d2 >> bit) & 1) << 2
        idx |= ((d3 >> bit) & 1) << 3
        if acc is None:
            acc = table[idx]  # the top bit is set in some digit, so idx != 0
            continue
        acc = double(acc)
        if idx:
            acc = add(acc, table[idx])
    assert acc is not None
    return acc
