"""On-chain verification of the committee's BLS aggregate signature by the FLChain v2 contract
(EIP-2537 precompiles; hash to G2 of RFC 9380 in the contract).

Runs on anvil with the Prague hardfork (``integration``). py-evm's Prague VM has the precompiles
too, in pure Python (~1.4 s per verifying call), so the embedded devnet is covered by one
``slow`` test only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from blspy import G2Element, PopSchemeMPL
from ledger_nodes import AnvilNode, anvil_binary, anvil_or_skip, start_anvil

from ledger.attestation import Attestation
from ledger.chain import Chain
from ledger.chain_errors import LedgerRevert
from ledger.commitment import commit_message, g2_compress_eip2537, g2_eip2537
from ledger.committee import Committee

CHANNEL = b"\x01" * 32
DIGESTS = [bytes([i]) * 32 for i in range(2, 7)]
COMMITTEE = Committee.from_seed(11, size=4)  # quorum 3
STRANGERS = Committee.from_seed("not-on-the-channel", size=4)


@pytest.fixture(scope="module")
def anvil() -> Iterator[AnvilNode]:
    with anvil_or_skip(n_accounts=3) as node:
        yield node


@pytest.fixture()
def chain(anvil: AnvilNode) -> Iterator[Chain]:
    with anvil.fresh_state():
        yield anvil.chain(n_accounts=3)


def _deploy(chain: Chain, verify: bool = True):
    return chain.deploy(CHANNEL, COMMITTEE.pubkeys_eip2537(), COMMITTEE.quorum, verify)


def _message(chain: Chain, contract, rnd: int) -> bytes:
    return commit_message(chain.w3.eth.chain_id, contract.address, CHANNEL, rnd, *DIGESTS)


def _commit(chain: Chain, contract, rnd: int, signers: int, signature: bytes):
    fn = contract.functions.commit(rnd, *DIGESTS, signers, signature)
    return chain.transact(fn, chain.aggregator)


def _aggregate(shares: dict[int, bytes]) -> bytes:
    return bytes(PopSchemeMPL.aggregate([G2Element.from_bytes(s) for s in shares.values()]))


@pytest.mark.integration
def test_valid_attestations_commit(chain: Chain) -> None:
    contract = _deploy(chain)
    assert chain.supports_bls_precompiles()
    assert contract.functions.verify_signatures().call() is True
    all4, no1, no0 = [True] * 4, [True, False, True, True], [False, True, True, True]
    for rnd, approve in enumerate([all4, no1, no0, all4]):
        att = COMMITTEE.attest(_message(chain, contract, rnd), approve)
        receipt = _commit(chain, contract, rnd, att.bitmap(), att.signature_eip2537())
        (ev,) = contract.events.Committed().process_receipt(receipt)
        assert ev["args"]["message"] == att.message == contract.functions.commitments(rnd).call()
        assert g2_compress_eip2537(ev["args"]["signature"]) == att.signature
        assert Attestation.from_bitmap(ev["args"]["signers"], att.signature, att.message) == att
    assert contract.functions.current_round().call() == 4
    plain = _deploy(chain, verify=False)
    att = COMMITTEE.attest(_message(chain, plain, 0))
    _commit(chain, plain, 0, att.bitmap(), att.signature_eip2537())
    gas = chain.gas_used("commit")
    print(
        f"\ncommit gas on anvil, verified (4, 3, 3, 4 signers; the first also opens the "
        f"round counter): {gas[:4]}; unverified (first): {gas[4]}"
    )


@pytest.mark.integration
def test_forged_signatures_rejected(chain: Chain) -> None:
    contract = _deploy(chain)
    msg = _message(chain, contract, 0)
    two = COMMITTEE.sign_shares(msg, [0, 1])
    with pytest.raises(LedgerRevert, match="no quorum"):
        _commit(chain, contract, 0, 0b0011, g2_eip2537(_aggregate(two)))
    # a bitmap claiming three signers over the aggregate of two signatures
    with pytest.raises(LedgerRevert, match="bad signature"):
        _commit(chain, contract, 0, 0b0111, g2_eip2537(_aggregate(two)))
    # signed by keys that are not the channel's committee
    stranger = STRANGERS.attest(msg)
    with pytest.raises(LedgerRevert, match="bad signature"):
        _commit(chain, contract, 0, stranger.bitmap(), stranger.signature_eip2537())
    # valid signatures, of another round and of another contract's round 0
    other_round = COMMITTEE.attest(_message(chain, contract, 1))
    twin = _deploy(chain)
    other_contract = COMMITTEE.attest(_message(chain, twin, 0))
    for att in (other_round, other_contract):
        with pytest.raises(LedgerRevert, match="bad signature"):
            _commit(chain, contract, 0, att.bitmap(), att.signature_eip2537())
    _commit(chain, twin, 0, other_contract.bitmap(), other_contract.signature_eip2537())
    assert contract.functions.current_round().call() == 0


@pytest.mark.integration
def test_malformed_signatures_rejected(chain: Chain) -> None:
    contract = _deploy(chain)
    att = COMMITTEE.attest(_message(chain, contract, 0))
    good = att.signature_eip2537()
    # a point of E2 outside the order-r subgroup (most points of E2 are)
    for x in range(1, 50):
        try:
            outside = g2_eip2537(bytes([0x80]) + bytes(47) + x.to_bytes(48, "big"))
            break
        except ValueError:
            continue
    cases = [
        good[:255],  # wrong length
        good[:255] + bytes([good[255] ^ 1]),  # off the curve
        bytes(256),  # the identity
        outside,
        bytes(128) + good[128:],
    ]
    for bad in cases:
        with pytest.raises(LedgerRevert, match="bad signature"):
            _commit(chain, contract, 0, att.bitmap(), bad)
    _commit(chain, contract, 0, att.bitmap(), good)


@pytest.mark.integration
def test_node_without_precompiles() -> None:
    """Before Prague (anvil --hardfork cancun) the probe says no and a verifying channel
    cannot be deployed (its keys cannot be checked), while a non-verifying one can."""
    binary = anvil_binary()
    if binary is None:
        pytest.skip("anvil not installed")
    node = start_anvil(binary, n_accounts=2, hardfork="cancun")
    try:
        chain = node.chain()
        assert not chain.supports_bls_precompiles()
        with pytest.raises(LedgerRevert, match="bad key"):
            _deploy(chain)
        _deploy(chain, verify=False)
    finally:
        node.stop()


@pytest.mark.slow
def test_embedded_chain_verifies_too() -> None:
    """py-evm's precompiles are pure Python: each verifying call takes seconds."""
    chain = Chain.embedded(seed=2, n_accounts=2)
    contract = _deploy(chain)
    msg = _message(chain, contract, 0)
    t0 = time.perf_counter()
    with pytest.raises(LedgerRevert, match="bad signature"):  # pre-flight call only
        _commit(
            chain, contract, 0, 0b0111, g2_eip2537(_aggregate(COMMITTEE.sign_shares(msg, [0, 1])))
        )
    t1 = time.perf_counter()
    att = COMMITTEE.attest(msg)
    receipt = _commit(chain, contract, 0, att.bitmap(), att.signature_eip2537())  # call + tx
    t2 = time.perf_counter()
    print(
        f"\npy-evm: rejecting call {t1 - t0:.2f} s, accepted commit (call + transaction) "
        f"{t2 - t1:.2f} s, gas {receipt['gasUsed']}"
    )
    assert contract.functions.current_round().call() == 1
