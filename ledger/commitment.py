"""The round commitment of FLChain v2 and the EIP-2537 encodings of BLS12-381 points.

Each round the aggregator sends one ``commit`` transaction to the channel contract
(``contracts/FLChain.vy``); the edge committee signs :func:`commit_message`, which the contract
recomputes as ``message(...)``. The contract checks the committee's aggregate signature with the
EIP-2537 precompiles, which take uncompressed points: :func:`g1_eip2537` and :func:`g2_eip2537`
turn the standard compressed (ZCash-format) public keys and signatures into that encoding, and
:func:`g2_compress_eip2537` turns a signature read back from a ``Committed`` event into the
compressed form again (cheap: no square root).

Encodings (EIP-2537, "Fine points and encoding"): an Fp element is 64 bytes big-endian (the top 16
zero); an Fp2 element ``c0 + c1 * v`` is ``encode(c0) || encode(c1)``; a G1 point is ``x || y``
(128 bytes), a G2 point ``x.c0 || x.c1 || y.c0 || y.c1`` (256 bytes); the point at infinity is all
zeros. The compressed form (draft-irtf-cfrg-pairing-friendly-curves, appendix C "ZCash
serialization") is x alone, with ``x.c1`` before ``x.c0`` in G2, and three flag bits on the first
byte: compressed (0x80), infinity (0x40) and the sign of y (0x20: y is the larger of y, -y,
comparing ``y.c1`` first in G2, then ``y.c0`` when ``y.c1 = 0``).

Decompression is done here with Python integers (square roots by ``pow``, since ``p = 3 mod 4``):
0.5-0.8 ms for G2 against 5-7 ms for py-ecc's ``signature_to_G2``; the tests compare both.
It checks that the point is on the curve but not that it lies in the prime-order subgroup: the
contract's PAIRING_CHECK does that for the signature, and blspy for every off-chain verification.
"""

from __future__ import annotations

import hashlib

from eth_abi import encode

#: First word of every signed commitment (also ``COMMIT_TAG`` in the contract).
COMMIT_TAG: bytes = hashlib.sha256(b"FLCHAIN-COMMIT-v2").digest()

#: The BLS12-381 base field modulus.
P = int(
    "1a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf"
    "6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaab",
    16,
)
_SQRT_EXP = (P + 1) // 4  # x^((p+1)/4) is a square root of x when one exists (p = 3 mod 4)
_HALF = (P - 1) // 2
_C_FLAG, _INF_FLAG, _SIGN_FLAG = 0x80, 0x40, 0x20
_FLAGS = _C_FLAG | _INF_FLAG | _SIGN_FLAG

_COMMIT_TYPES = ["bytes32", "uint256", "address", "bytes32", "uint256"] + ["bytes32"] * 5


def fixed_bytes(value: object, length: int, what: str) -> bytes:
    """``value`` as ``bytes`` if it is ``length`` bytes long, else a one-line ``ValueError``."""
    if not isinstance(value, bytes | bytearray) or len(value) != length:
        got = len(value) if isinstance(value, bytes | bytearray) else type(value).__name__
        raise ValueError(f"{what} must be {length} bytes, got {got}")
    return bytes(value)


def commit_message(
    chain_id: int,
    contract: str,
    channel: bytes,
    rnd: int,
    global_hash: bytes,
    submissions_root: bytes,
    verdicts_hash: bytes,
    admitted_root: bytes,
    pack_id: bytes,
) -> bytes:
    """The 32 bytes the committee signs for round ``rnd`` (the contract's ``message(...)``).

    ``sha256(abi.encode(COMMIT_TAG, chain_id, contract, channel, rnd, global_hash,
    submissions_root, verdicts_hash, admitted_root, pack_id))``: the chain id and the contract
    address bind it to one deployment, the channel and round to one step of one experiment.

    Parameters
    ----------
    chain_id : int
        EIP-155 chain id.
    contract : str
        The channel contract's address (``0x`` hex, any case).
    channel : bytes
        32-byte channel id.
    rnd : int
        Round, in ``[0, 2**256)``.
    global_hash, submissions_root, verdicts_hash, admitted_root, pack_id : bytes
        The round's 32-byte digests.

    Returns
    -------
    bytes
        32-byte SHA-256 digest.

    Raises
    ------
    ValueError
        A field has the wrong type or length, or a number is out of range.
    """
    for name, value in (("chain_id", chain_id), ("rnd", rnd)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**256:
            raise ValueError(f"{name} must be an int in [0, 2**256), got {value!r}")
    if not isinstance(contract, str) or len(contract.removeprefix("0x")) != 40:
        raise ValueError(f"contract must be a 20-byte 0x-hex address, got {contract!r}")
    address = bytes.fromhex(contract.removeprefix("0x"))
    words = [
        fixed_bytes(v, 32, name)
        for name, v in (
            ("channel", channel),
            ("global_hash", global_hash),
            ("submissions_root", submissions_root),
            ("verdicts_hash", verdicts_hash),
            ("admitted_root", admitted_root),
            ("pack_id", pack_id),
        )
    ]
    values = [COMMIT_TAG, chain_id, address, words[0], rnd, *words[1:]]
    return hashlib.sha256(encode(_COMMIT_TYPES, values)).digest()


def _fp(value: int) -> bytes:
    return value.to_bytes(64, "big")


def _split(data: bytes, length: int, what: str) -> tuple[int, bool, bool]:
    """Flags and x-bits of a compressed point: ``(x_int, infinity, sign)``; checks the flags."""
    data = fixed_bytes(data, length, what)
    flags = data[0] & _FLAGS
    x = int.from_bytes(bytes([data[0] & ~_FLAGS & 0xFF]) + data[1:], "big")
    if not flags & _C_FLAG:
        raise ValueError(f"{what} is not in compressed form")
    if flags & _INF_FLAG:
        if flags != _C_FLAG | _INF_FLAG or x:
            raise ValueError(f"{what} has the infinity flag but is not the encoded infinity")
        return 0, True, False
    return x, False, bool(flags & _SIGN_FLAG)


def g1_eip2537(pubkey48: bytes) -> bytes:
    """A compressed G1 point (a 48-byte BLS public key) in EIP-2537 encoding (128 bytes).

    Raises
    ------
    ValueError
        Wrong length, bad flags, x not below p or not the abscissa of a point of the curve.
    """
    x, inf, sign = _split(pubkey48, 48, "G1 point")
    if inf:
        return bytes(128)
    if x >= P:
        raise ValueError("G1 point x is not below the field modulus")
    rhs = (pow(x, 3, P) + 4) % P  # y^2 = x^3 + 4
    y = pow(rhs, _SQRT_EXP, P)
    if y * y % P != rhs:
        raise ValueError("G1 point is not on the curve")
    if (y > _HALF) != sign:
        y = P - y
    return _fp(x) + _fp(y)


def _fp2_mul(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    return (a[0] * b[0] - a[1] * b[1]) % P, (a[0] * b[1] + a[1] * b[0]) % P


def _fp2_sqrt(a: tuple[int, int]) -> tuple[int, int] | None:
    """A square root in Fp2 = Fp[v]/(v^2 + 1), or None. With ``n = a0^2 + a1^2`` (the norm)
    and ``s = sqrt(n)``, a root is ``x0 + x1 v`` with ``x0^2 = (a0 + s)/2`` (or ``(a0 - s)/2``)
    and ``x1 = a1 / (2 x0)``."""
    a0, a1 = a
    if a1 == 0:
        r = pow(a0, _SQRT_EXP, P)
        if r * r % P == a0:
            return r, 0
        r = pow(-a0 % P, _SQRT_EXP, P)  # a0 = -(r^2) = (r v)^2
        return (0, r) if r * r % P == -a0 % P else None
    s = pow((a0 * a0 + a1 * a1) % P, _SQRT_EXP, P)
    inv2 = (P + 1) // 2
    for t in ((a0 + s) * inv2 % P, (a0 - s) * inv2 % P):
        x0 = pow(t, _SQRT_EXP, P)
        if x0 and x0 * x0 % P == t:
            root = (x0, a1 * pow(2 * x0, -1, P) % P)
            return root if _fp2_mul(root, root) == (a0 % P, a1 % P) else None
    return None


def g2_eip2537(sig96: bytes) -> bytes:
    """A compressed G2 point (a 96-byte BLS signature) in EIP-2537 encoding (256 bytes).

    Raises
    ------
    ValueError
        Wrong length, bad flags, a coordinate not below p or not the abscissa of a point of
        the curve ``y^2 = x^3 + 4 (1 + v)``.
    """
    x_hi, inf, sign = _split(sig96, 96, "G2 point")
    if inf:
        return bytes(256)
    x1, x0 = x_hi >> 384, x_hi & ((1 << 384) - 1)  # x.c1 comes first in the compressed form
    if x0 >= P or x1 >= P:
        raise ValueError("G2 point x is not below the field modulus")
    x_sq = _fp2_mul((x0, x1), (x0, x1))
    rhs = _fp2_mul(x_sq, (x0, x1))
    rhs = ((rhs[0] + 4) % P, (rhs[1] + 4) % P)
    y = _fp2_sqrt(rhs)
    if y is None:
        raise ValueError("G2 point is not on the curve")
    if _g2_sign(y) != sign:
        y = (-y[0] % P, -y[1] % P)
    return _fp(x0) + _fp(x1) + _fp(y[0]) + _fp(y[1])


def _g2_sign(y: tuple[int, int]) -> bool:
    return y[1] > _HALF if y[1] else y[0] > _HALF


def g2_compress_eip2537(point256: bytes) -> bytes:
    """Inverse of :func:`g2_eip2537`: the 96-byte compressed form of an EIP-2537 G2 point.

    Does not check that the point is on the curve (compress what the chain recorded, then
    compare bytes or verify with blspy, which does).

    Raises
    ------
    ValueError
        Wrong length or a coordinate not below p.
    """
    data = fixed_bytes(point256, 256, "G2 point")
    x0, x1, y0, y1 = (int.from_bytes(data[i : i + 64], "big") for i in range(0, 256, 64))
    if max(x0, x1, y0, y1) >= P:
        raise ValueError("G2 point coordinate is not below the field modulus")
    if not (x0 or x1 or y0 or y1):
        return bytes([_C_FLAG | _INF_FLAG]) + bytes(95)
    out = bytearray(((x1 << 384) | x0).to_bytes(96, "big"))
    out[0] |= _C_FLAG | (_SIGN_FLAG if _g2_sign((y0, y1)) else 0)
    return bytes(out)
