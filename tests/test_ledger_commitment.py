"""The FLChain v2 round commitment and the EIP-2537 point encodings (py-ecc as the reference for
decompression)."""

from __future__ import annotations

import hashlib
import time

import pytest
from py_ecc.bls.g2_primitives import pubkey_to_G1, signature_to_G2
from py_ecc.optimized_bls12_381 import FQ, FQ2, b, b2, is_on_curve, normalize

from ledger.commitment import (
    COMMIT_TAG,
    P,
    commit_message,
    g1_eip2537,
    g2_compress_eip2537,
    g2_eip2537,
)
from ledger.committee import Committee

CONTRACT = "0x" + "ab" * 20
CHANNEL = b"\x01" * 32
DIGESTS = [bytes([i]) * 32 for i in range(2, 7)]
NAMES = ["global_hash", "submissions_root", "verdicts_hash", "admitted_root", "pack_id"]


@pytest.fixture(scope="module")
def committee() -> Committee:
    return Committee.from_seed(99, size=4)


@pytest.fixture(scope="module")
def signatures(committee: Committee) -> list[bytes]:
    return [committee.attest(hashlib.sha256(b"%d" % i).digest()).signature for i in range(30)]


def _ref_g1(pubkey: bytes) -> bytes:
    x, y = normalize(pubkey_to_G1(pubkey))
    return int(x).to_bytes(64, "big") + int(y).to_bytes(64, "big")


def _ref_g2(signature: bytes) -> bytes:
    x, y = normalize(signature_to_G2(signature))
    return b"".join(int(c).to_bytes(64, "big") for c in (*x.coeffs, *y.coeffs))


def test_commit_tag() -> None:
    assert COMMIT_TAG == hashlib.sha256(b"FLCHAIN-COMMIT-v2").digest() and len(COMMIT_TAG) == 32


def test_commit_message_is_sha256_of_the_abi_words() -> None:
    words = [
        COMMIT_TAG,
        (31337).to_bytes(32, "big"),
        bytes(12) + bytes.fromhex("ab" * 20),
        CHANNEL,
        (7).to_bytes(32, "big"),
        *DIGESTS,
    ]
    expected = hashlib.sha256(b"".join(words)).digest()
    assert commit_message(31337, CONTRACT, CHANNEL, 7, *DIGESTS) == expected
    assert (
        commit_message(31337, CONTRACT.upper().replace("0X", "0x"), CHANNEL, 7, *DIGESTS)
        == expected
    )
    others = {
        commit_message(1, CONTRACT, CHANNEL, 7, *DIGESTS),
        commit_message(31337, "0x" + "ac" * 20, CHANNEL, 7, *DIGESTS),
        commit_message(31337, CONTRACT, b"\x09" * 32, 7, *DIGESTS),
        commit_message(31337, CONTRACT, CHANNEL, 8, *DIGESTS),
        *(
            commit_message(31337, CONTRACT, CHANNEL, 7, *d)
            for d in ([*DIGESTS[:i], b"\xee" * 32, *DIGESTS[i + 1 :]] for i in range(5))
        ),
    }
    assert expected not in others and len(others) == 9


def test_commit_message_validation() -> None:
    for i, name in enumerate(NAMES):
        short = [*DIGESTS[:i], DIGESTS[i][:31], *DIGESTS[i + 1 :]]
        with pytest.raises(ValueError, match=f"^{name} must be 32 bytes, got 31$"):
            commit_message(1, CONTRACT, CHANNEL, 0, *short)
    with pytest.raises(ValueError, match="^channel must be 32 bytes, got str$"):
        commit_message(1, CONTRACT, "x" * 32, 0, *DIGESTS)
    with pytest.raises(ValueError, match="^rnd must be an int"):
        commit_message(1, CONTRACT, CHANNEL, -1, *DIGESTS)
    with pytest.raises(ValueError, match="^rnd must be an int"):
        commit_message(1, CONTRACT, CHANNEL, True, *DIGESTS)
    with pytest.raises(ValueError, match="^chain_id must be an int"):
        commit_message(2**256, CONTRACT, CHANNEL, 0, *DIGESTS)
    with pytest.raises(ValueError, match="^contract must be a 20-byte"):
        commit_message(1, "0x1234", CHANNEL, 0, *DIGESTS)


def test_g1_matches_py_ecc(committee: Committee) -> None:
    for v in committee.validators:
        enc = g1_eip2537(v.public_key)
        assert enc == _ref_g1(v.public_key)
        x, y = int.from_bytes(enc[:64], "big"), int.from_bytes(enc[64:], "big")
        assert is_on_curve((FQ(x), FQ(y), FQ(1)), b)
    assert g1_eip2537(bytes([0xC0]) + bytes(47)) == bytes(128)


def test_g2_matches_py_ecc_and_compresses_back(signatures: list[bytes]) -> None:
    for sig in signatures:
        enc = g2_eip2537(sig)
        assert enc == _ref_g2(sig)
        x0, x1, y0, y1 = (int.from_bytes(enc[i : i + 64], "big") for i in range(0, 256, 64))
        assert is_on_curve((FQ2([x0, x1]), FQ2([y0, y1]), FQ2([1, 0])), b2)  # c0 before c1
        assert g2_compress_eip2537(enc) == sig
    infinity = bytes([0xC0]) + bytes(95)
    assert g2_eip2537(infinity) == bytes(256) and g2_compress_eip2537(bytes(256)) == infinity


def test_sign_flag_picks_y(signatures: list[bytes], committee: Committee) -> None:
    flipped = bytes([signatures[0][0] ^ 0x20]) + signatures[0][1:]
    a, c = g2_eip2537(signatures[0]), g2_eip2537(flipped)
    assert a[:128] == c[:128]
    assert all(
        (int.from_bytes(a[i : i + 64], "big") + int.from_bytes(c[i : i + 64], "big")) % P == 0
        for i in (128, 192)
    )
    pk = committee.validators[0].public_key
    g, h = g1_eip2537(pk), g1_eip2537(bytes([pk[0] ^ 0x20]) + pk[1:])
    assert g[:64] == h[:64] and int.from_bytes(g[64:], "big") + int.from_bytes(h[64:], "big") == P


def test_malformed_points_rejected(signatures: list[bytes], committee: Committee) -> None:
    sig, pk = signatures[0], committee.validators[0].public_key
    cases = [
        (g2_eip2537, sig[:95], "G2 point must be 96 bytes, got 95"),
        (g2_eip2537, bytes([sig[0] & 0x7F]) + sig[1:], "not in compressed form"),
        (g2_eip2537, bytes([0xC0]) + bytes(94) + b"\x01", "infinity flag"),
        (g2_eip2537, bytes([0xE0]) + bytes(95), "infinity flag"),
        (g2_eip2537, b"\x9f" + b"\xff" * 95, "below the field modulus"),
        (g1_eip2537, pk[:47], "G1 point must be 48 bytes, got 47"),
        (g1_eip2537, b"\x9f" + b"\xff" * 47, "below the field modulus"),
        (g1_eip2537, bytes([pk[0] & 0x7F]) + pk[1:], "not in compressed form"),
        (g2_compress_eip2537, bytes(255), "G2 point must be 256 bytes, got 255"),
        (g2_compress_eip2537, P.to_bytes(64, "big") + bytes(192), "below the field modulus"),
    ]
    for fn, data, match in cases:
        with pytest.raises(ValueError, match=match):
            fn(data)
    # x values with no point on the curve
    off_g1 = next(x for x in range(1, 100) if pow((x**3 + 4) % P, (P - 1) // 2, P) != 1)
    with pytest.raises(ValueError, match="not on the curve"):
        g1_eip2537(bytes([0x80]) + off_g1.to_bytes(47, "big"))
    found = 0
    for x0 in range(1, 40):  # about half of the x are not abscissas of E2
        try:
            g2_eip2537(bytes([0x80]) + bytes(47) + x0.to_bytes(48, "big"))
        except ValueError as exc:
            assert "not on the curve" in str(exc)
            found += 1
    assert 5 < found < 35


def test_decompression_timing(signatures: list[bytes]) -> None:
    """Ours against py-ecc's (printed, not asserted)."""
    t0 = time.perf_counter()
    for sig in signatures:
        g2_eip2537(sig)
    t1 = time.perf_counter()
    for sig in signatures:
        _ref_g2(sig)
    t2 = time.perf_counter()
    n = len(signatures)
    print(
        f"\nG2 decompression: {(t1 - t0) / n * 1e3:.2f} ms here, "
        f"{(t2 - t1) / n * 1e3:.2f} ms py-ecc"
    )
