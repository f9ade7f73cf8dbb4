# pragma version ~=0.4.3
"""
@title FLChain channel ledger, v2: one committee-signed commitment per round
@notice One instance per FLChain channel (Majeed & Hong 2019): an experiment and
        its global model. Each round the aggregator (the deployer) sends ONE
        transaction, `commit`, carrying the round's digests (global model,
        submissions Merkle root, verdicts, admitted clients, blob pack) and the
        edge committee's aggregate BLS signature over `message(...)`.
@dev    BLS signatures follow the IETF BLS signature draft
        (draft-irtf-cfrg-bls-signature-05), ciphersuite
        BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_: public keys in G1,
        signatures in G2, FastAggregateVerify over the signers' keys. Hashing to
        G2 is hash_to_curve of RFC 9380 (expand_message_xmd with SHA-256,
        hash_to_field with count 2, map_to_curve and clear_cofactor done by the
        MAP_FP2_TO_G2 precompile). Curve arithmetic and the pairing use the
        EIP-2537 precompiles (Prague); points use EIP-2537's encoding: each Fp
        element as 64 bytes big-endian (top 16 zero), Fp2 as c0 || c1.
        Departures from the draft: committee keys are not KeyValidate'd here
        (they are checked off chain with their proofs of possession at
        registration; the constructor only checks they are on the curve and not
        the identity), and the subgroup checks of the aggregate key and of the
        signature are those PAIRING_CHECK performs on its inputs.
"""

event Committed:
    round: indexed(uint256)
    global_hash: bytes32
    submissions_root: bytes32
    verdicts_hash: bytes32
    admitted_root: bytes32
    pack_id: bytes32
    signers: uint256
    signature: Bytes[256]
    message: bytes32

MAX_COMMITTEE: constant(uint256) = 32

#: sha256(b"FLCHAIN-COMMIT-v2"), first word of every signed commitment.
COMMIT_TAG: public(constant(bytes32)) = 0x8bba734990f704ccbab8aeda0b776331673c5c5c4187b70c0eb786af5338f77a

# Precompiles: MODEXP (EIP-198) and BLS12-381 (EIP-2537, Prague addresses).
MODEXP: constant(address) = 0x0000000000000000000000000000000000000005
G1ADD: constant(address) = 0x000000000000000000000000000000000000000b
G2ADD: constant(address) = 0x000000000000000000000000000000000000000d
PAIRING_CHECK: constant(address) = 0x000000000000000000000000000000000000000F
MAP_FP2_TO_G2: constant(address) = 0x0000000000000000000000000000000000000011

#: Domain separation tag of the ciphersuite followed by its length (43 = 0x2b),
#: i.e. DST_prime of RFC 9380, section 5.3.1.
DST_PRIME: constant(Bytes[44]) = b"BLS_SIG_BLS12381G2_XMD:SHA-256_SSWU_RO_POP_\x2b"
#: The BLS12-381 base field modulus p as a 64-byte MODEXP operand.
FIELD_P: constant(Bytes[64]) = x"000000000000000000000000000000001a0111ea397fe69a4b1ba7b6434bacd764774b84f38512bf6730d2a0f6b0f6241eabfffeb153ffffb9feffffffffaaab"
#: -G1 generator (x, p - y) in EIP-2537 encoding.
NEG_G1: constant(Bytes[128]) = x"0000000000000000000000000000000017f1d3a73197d7942695638c4fa9ac0fc3688c4f9774b905a14e3a3f171bac586c55e83ff97a1aeffb3af00adb22c6bb00000000000000000000000000000000114d1d6855d545a8aa7d76c8cf2e21f267816aef1db507c96655b9d5caac42364e6f38ba0ecb751bad54dcd6b939c2ca"

aggregator: public(address)
channel_id: public(bytes32)
current_round: public(uint256)
quorum: public(uint256)
committee_size: public(uint256)
verify_signatures: public(bool)
commitments: public(HashMap[uint256, bytes32])
# Validator i's key, x (48 bytes) || y (48 bytes) in three words: the 128-byte
# EIP-2537 encoding less its zero padding (3 storage reads instead of 5).
key_words: HashMap[uint256, bytes32[3]]


@deploy
def __init__(
    channel_id: bytes32,
    committee: DynArray[Bytes[128], MAX_COMMITTEE],
    quorum: uint256,
    verify_signatures: bool,
):
    """
    @param committee Public keys of the edge validators in index order,
           EIP-2537 G1 encoding (128 bytes each); may be empty (no committee).
    @param quorum Minimum number of signers of a commitment, 1..len(committee),
           or 0 with an empty committee.
    @param verify_signatures Check the aggregate signature of every commitment
           on chain (needs the EIP-2537 precompiles).
    """
    n: uint256 = len(committee)
    if n == 0:
        assert quorum == 0 and not verify_signatures, "empty committee"
    else:
        assert quorum >= 1 and quorum <= n, "bad quorum"
    for i: uint256 in range(MAX_COMMITTEE):
        if i == n:
            break
        key: Bytes[128] = committee[i]
        assert len(key) == 128, "bad key"
        words: bytes32[3] = [
            extract32(key, 16),
            convert(concat(slice(key, 48, 16), slice(key, 80, 16)), bytes32),
            extract32(key, 96),
        ]
        assert self._key(words) == key, "bad key"  # both coordinates' top 16 bytes zero
        if verify_signatures:
            assert self._is_g1_point(key), "bad key"
        self.key_words[i] = words
    self.aggregator = msg.sender
    self.channel_id = channel_id
    self.quorum = quorum
    self.committee_size = n
    self.verify_signatures = verify_signatures


@view
@external
def committee_key(i: uint256) -> Bytes[128]:
    """
    @notice Validator i's public key in EIP-2537 G1 encoding.
    """
    assert i < self.committee_size, "unknown signer"
    return self._key(self.key_words[i])


@view
@external
def message(
    round: uint256,
    global_hash: bytes32,
    submissions_root: bytes32,
    verdicts_hash: bytes32,
    admitted_root: bytes32,
    pack_id: bytes32,
) -> bytes32:
    """
    @notice The 32 bytes the committee signs for a round of this channel.
    """
    return self._message(
        round, global_hash, submissions_root, verdicts_hash, admitted_root, pack_id
    )


@external
def commit(
    round: uint256,
    global_hash: bytes32,
    submissions_root: bytes32,
    verdicts_hash: bytes32,
    admitted_root: bytes32,
    pack_id: bytes32,
    signers: uint256,
    signature: Bytes[256],
):
    """
    @notice Record round `round` (aggregator only, in order, once).
    @param signers Bitmap of the validators that signed (bit i = validator i).
    @param signature Their aggregate signature in EIP-2537 G2 encoding
           (ignored unless `verify_signatures`).
    """
    assert msg.sender == self.aggregator, "not aggregator"
    assert round == self.current_round, "out of order"
    assert signers >> self.committee_size == 0, "unknown signer"
    count: uint256 = 0
    for i: uint256 in range(MAX_COMMITTEE):
        if signers >> i == 0:
            break
        count += (signers >> i) & 1
    assert count >= self.quorum, "no quorum"
    digest: bytes32 = self._message(
        round, global_hash, submissions_root, verdicts_hash, admitted_root, pack_id
    )
    if self.verify_signatures:
        assert self._verify(signers, digest, signature), "bad signature"
    self.commitments[round] = digest
    self.current_round = round + 1
    log Committed(
        round=round, global_hash=global_hash, submissions_root=submissions_root,
        verdicts_hash=verdicts_hash, admitted_root=admitted_root, pack_id=pack_id,
        signers=signers, signature=signature, message=digest
    )


@view
@internal
def _message(
    round: uint256,
    global_hash: bytes32,
    submissions_root: bytes32,
    verdicts_hash: bytes32,
    admitted_root: bytes32,
    pack_id: bytes32,
) -> bytes32:
    return sha256(abi_encode(
        COMMIT_TAG, chain.id, self, self.channel_id, round, global_hash,
        submissions_root, verdicts_hash, admitted_root, pack_id
    ))


@pure
@internal
def _key(words: bytes32[3]) -> Bytes[128]:
    """
    EIP-2537 encoding of a key from its stored words: 0^16 || x || 0^16 || y.
    """
    pad: bytes16 = empty(bytes16)
    return concat(
        pad, words[0], slice(words[1], 0, 16), pad, slice(words[1], 16, 16), words[2]
    )


@view
@internal
def _verify(signers: uint256, digest: bytes32, signature: Bytes[256]) -> bool:
    """
    FastAggregateVerify: e(apk, H(m)) == e(G1, signature), checked as
    e(apk, H(m)) * e(-G1, signature) == 1 by PAIRING_CHECK, where apk is the sum
    of the signers' keys (commit has checked there is at least one signer).
    """
    apk: Bytes[128] = b""
    ok: bool = True
    for i: uint256 in range(MAX_COMMITTEE):
        if signers >> i == 0:
            break
        if (signers >> i) & 1 == 1:
            key: Bytes[128] = self._key(self.key_words[i])
            if len(apk) == 0:
                apk = key
            else:
                ok, apk = raw_call(
                    G1ADD, concat(apk, key), max_outsize=128, is_static_call=True,
                    revert_on_failure=False,
                )
                assert ok and len(apk) == 128, "bad signature"
    out: Bytes[32] = b""
    ok, out = raw_call(
        PAIRING_CHECK,
        concat(apk, self._hash_to_g2(digest), NEG_G1, signature),
        max_outsize=32, is_static_call=True, revert_on_failure=False,
    )
    # a failed call (a malformed signature: wrong length, off the curve, outside the
    # subgroup) or a missing precompile (empty output) is a bad signature
    return ok and len(out) == 32 and convert(out, uint256) == 1


@view
@internal
def _hash_to_g2(digest: bytes32) -> Bytes[256]:
    """
    hash_to_curve(digest) of RFC 9380 (section 3) for BLS12381G2_XMD:SHA-256_SSWU_RO_:
    u0, u1 = hash_to_field(digest, 2); Q0, Q1 = MAP_FP2_TO_G2(u0), MAP_FP2_TO_G2(u1)
    (EIP-2537's map is map_to_curve followed by clear_cofactor); return Q0 + Q1.
    """
    b: bytes32[8] = self._expand_message_xmd(digest)
    q0: Bytes[256] = self._call(MAP_FP2_TO_G2, concat(
        self._mod_p(b[0], b[1]), self._mod_p(b[2], b[3])
    ))
    q1: Bytes[256] = self._call(MAP_FP2_TO_G2, concat(
        self._mod_p(b[4], b[5]), self._mod_p(b[6], b[7])
    ))
    return self._call(G2ADD, concat(q0, q1))


@pure
@internal
def _expand_message_xmd(digest: bytes32) -> bytes32[8]:
    """
    expand_message_xmd (RFC 9380, section 5.3.1) with SHA-256, len_in_bytes = 256:
    b_0 = H(Z_pad || digest || I2OSP(256, 2) || I2OSP(0, 1) || DST_prime),
    b_1 = H(b_0 || I2OSP(1, 1) || DST_prime),
    b_i = H((b_0 XOR b_(i-1)) || I2OSP(i, 1) || DST_prime); returns b_1 .. b_8.
    """
    b0: bytes32 = sha256(concat(empty(bytes32), empty(bytes32), digest, x"010000", DST_PRIME))
    out: bytes32[8] = empty(bytes32[8])
    prev: bytes32 = sha256(concat(b0, x"01", DST_PRIME))
    out[0] = prev
    for i: uint256 in range(1, 8):
        mixed: uint256 = convert(b0, uint256) ^ convert(prev, uint256)
        prev = sha256(concat(
            convert(mixed, bytes32), slice(convert(i + 1, bytes32), 31, 1), DST_PRIME
        ))
        out[i] = prev
    return out


@view
@internal
def _mod_p(hi: bytes32, lo: bytes32) -> Bytes[64]:
    """
    The 64-byte big-endian integer hi || lo reduced mod p (hash_to_field's OS2IP(tv) mod p),
    as MODEXP(base = hi || lo, exponent = 1, modulus = p); already EIP-2537 Fp encoding.
    """
    ok: bool = False
    out: Bytes[64] = b""
    ok, out = raw_call(
        MODEXP,
        concat(
            convert(64, bytes32), convert(1, bytes32), convert(64, bytes32),
            hi, lo, x"01", FIELD_P
        ),
        max_outsize=64, is_static_call=True, revert_on_failure=False,
    )
    assert ok and len(out) == 64, "bad signature"
    return out


@view
@internal
def _is_g1_point(key: Bytes[128]) -> bool:
    """
    Whether `key` is a point of the G1 curve other than the identity: G1ADD(key, 0) fails
    for a point off the curve (EIP-2537 checks that, not the subgroup). With no 2-torsion
    on this curve, y = 0 only encodes the identity.
    """
    zero: bytes32 = empty(bytes32)
    if extract32(key, 64) == zero and extract32(key, 96) == zero:
        return False
    ok: bool = False
    out: Bytes[128] = b""
    ok, out = raw_call(
        G1ADD, concat(key, zero, zero, zero, zero), max_outsize=128, is_static_call=True,
        revert_on_failure=False,
    )
    return ok and out == key


@view
@internal
def _call(precompile: address, data: Bytes[512]) -> Bytes[256]:
    """
    Static call to a G2 precompile; reverts "bad signature" unless it returns a G2 point
    (it fails on bad input; a node without it returns nothing).
    """
    ok: bool = False
    out: Bytes[256] = b""
    ok, out = raw_call(
        precompile, data, max_outsize=256, is_static_call=True, revert_on_failure=False
    )
    assert ok and len(out) == 256, "bad signature"
    return out
