"""Tests for the FLChain channel contract and chain backend (Majeed & Hong 2019).

Every contract test runs on both backends: the embedded devnet (py-evm) and a real anvil node
(``integration``; one node per session, each test on an ``evm_snapshot`` reverted afterwards, so
every test sees fresh accounts, nonces and blocks).  Tests of the embedded devnet itself
(reproducible genesis, the transaction index) stay embedded-only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ledger_nodes import ANVIL_CHAIN_ID, AnvilNode, anvil_or_skip

from ledger.chain import EMBEDDED_CALL_GAS, Chain, LedgerRevert, derive_accounts
from ledger.compile import EVM_VERSION, compile_flchain
from ledger.pyevm import IndexedPyEVMBackend

CHANNEL = b"\x01" * 32
KEY = b"\x02" * 32
UPD = b"\x03" * 32
BASE = b"\x04" * 32
GAS_BOUND = 200_000


@pytest.fixture(scope="module")
def compiled():
    return compile_flchain()


@pytest.fixture(scope="session")
def anvil() -> Iterator[AnvilNode]:
    """One local anvil node for the session (skipped if not installed, see ledger_nodes)."""
    with anvil_or_skip(n_accounts=5) as node:
        yield node


@pytest.fixture(params=["embedded", pytest.param("anvil", marks=pytest.mark.integration)])
def chain(request: pytest.FixtureRequest) -> Iterator[Chain]:
    """A fresh chain with 5 funded accounts on each backend."""
    if request.param == "embedded":
        yield Chain.embedded(seed=7, n_accounts=5)
        return
    node: AnvilNode = request.getfixturevalue("anvil")
    with node.fresh_state():
        yield node.chain(n_accounts=5)


@pytest.fixture()
def channel(chain: Chain):
    contract = chain.deploy(CHANNEL)
    for client in chain.accounts[1:3]:
        chain.transact(contract.functions.register(client.address, KEY), chain.aggregator)
    return contract


def _submit(contract, rnd: int = 0, samples: int = 10):
    return contract.functions.submit(rnd, UPD, samples, BASE)


def _finalize(contract, rnd: int):
    return contract.functions.finalize(rnd, b"\x05" * 32, b"\x06" * 32, b"\x07" * 32, b"\x08" * 32)


def test_compile_deterministic_and_cached(compiled) -> None:
    assert compiled.evm_version == EVM_VERSION == "shanghai"
    assert compiled.compiler_version.startswith("0.4.3")
    assert compile_flchain() is compiled
    from ledger.compile import _compile

    _compile.cache_clear()
    again = compile_flchain()
    assert again is not compiled
    assert again.runtime_sha256 == compiled.runtime_sha256
    assert again.bytecode == compiled.bytecode


def test_deploy_and_code_hash(chain: Chain, compiled) -> None:
    contract = chain.deploy(CHANNEL)
    assert contract.functions.aggregator().call() == chain.aggregator.address
    assert contract.functions.channel_id().call() == CHANNEL
    assert contract.functions.current_round().call() == 0
    assert chain.code_sha256(contract.address) == compiled.runtime_sha256


def test_embedded_is_reproducible() -> None:
    a, b = Chain.embedded(seed=3, n_accounts=3), Chain.embedded(seed=3, n_accounts=3)
    assert [x.address for x in a.accounts] == [x.address for x in b.accounts]
    assert a.w3.eth.get_block(0)["hash"] == b.w3.eth.get_block(0)["hash"]
    assert a.deploy(CHANNEL).address == b.deploy(CHANNEL).address
    assert derive_accounts(3, 1)[0].address != derive_accounts(4, 1)[0].address


def test_register_emits_event(chain: Chain, channel) -> None:
    client = chain.accounts[1]
    assert channel.functions.registered(client.address).call() == KEY
    assert channel.functions.num_clients().call() == 2
    logs = channel.events.Registered().get_logs(from_block=0)
    assert [ev["args"]["client"] for ev in logs] == [a.address for a in chain.accounts[1:3]]


def test_register_only_aggregator(chain: Chain, channel) -> None:
    with pytest.raises(LedgerRevert, match="not aggregator"):
        chain.transact(
            channel.functions.register(chain.accounts[3].address, KEY), chain.accounts[1]
        )


def test_submit_emits_submitted(chain: Chain, channel) -> None:
    client = chain.accounts[1]
    receipt = chain.transact(_submit(channel, samples=42), client)
    (ev,) = channel.events.Submitted().process_receipt(receipt)
    assert ev["args"]["round"] == 0
    assert ev["args"]["client"] == client.address
    assert ev["args"]["update_hash"] == UPD
    assert ev["args"]["samples"] == 42
    assert ev["args"]["base_hash"] == BASE
    assert channel.functions.submitted(0, client.address).call() is True


@pytest.mark.parametrize("mode", ["preflight", "estimate", "explicit-gas"])
def test_rules_rejected(chain: Chain, channel, mode: str) -> None:
    gas = 150_000 if mode == "explicit-gas" else None
    if mode == "estimate":
        chain.call_gas = None  # eth_estimateGas path, the RPC default
    elif mode == "preflight":
        chain.call_gas = EMBEDDED_CALL_GAS  # eth_call pre-flight + fixed cap, the embedded default
    agg, c1, outsider = chain.aggregator, chain.accounts[1], chain.accounts[4]
    with pytest.raises(LedgerRevert, match="not registered"):
        chain.transact(_submit(channel), outsider, gas=gas)
    chain.transact(_submit(channel), c1)
    with pytest.raises(LedgerRevert, match="already submitted") as info:
        chain.transact(_submit(channel), c1, gas=gas)
    if gas is not None:  # explicit gas: mined with status 0, reason recovered
        assert info.value.receipt is not None and info.value.receipt["status"] == 0
    with pytest.raises(LedgerRevert, match="wrong round"):
        chain.transact(_submit(channel, rnd=1), chain.accounts[2], gas=gas)
    with pytest.raises(LedgerRevert, match="not aggregator"):
        chain.transact(_finalize(channel, 0), c1, gas=gas)
    with pytest.raises(LedgerRevert, match="out of order"):
        chain.transact(_finalize(channel, 1), agg, gas=gas)
    assert channel.functions.current_round().call() == 0


def test_finalize_advances_round(chain: Chain, channel) -> None:
    chain.transact(_submit(channel), chain.accounts[1])
    receipt = chain.transact(_finalize(channel, 0), chain.aggregator)
    (ev,) = channel.events.Finalized().process_receipt(receipt)
    assert ev["args"]["round"] == 0
    assert ev["args"]["merkle_root"] == b"\x06" * 32
    assert channel.functions.current_round().call() == 1
    record = channel.functions.rounds(0).call()
    assert tuple(record) == (b"\x05" * 32, b"\x06" * 32, b"\x07" * 32, b"\x08" * 32, 1)
    assert ev["args"]["attestation_hash"] == b"\x08" * 32
    with pytest.raises(LedgerRevert, match="out of order"):
        chain.transact(_finalize(channel, 0), chain.aggregator)
    with pytest.raises(LedgerRevert, match="wrong round"):
        chain.transact(_submit(channel, rnd=0), chain.accounts[2])
    chain.transact(_submit(channel, rnd=1), chain.accounts[1])  # new round reopens


def test_gas_bounds(chain: Chain, channel) -> None:
    for client in chain.accounts[1:3]:
        chain.transact(_submit(channel), client)
    chain.transact(_finalize(channel, 0), chain.aggregator)
    submits, finals = chain.gas_used("submit"), chain.gas_used("finalize")
    assert len(submits) == 2 and len(finals) == 1
    assert all(0 < g < GAS_BOUND for g in submits + finals)
    assert all(0 < g < GAS_BOUND for g in chain.gas_used("register"))


def test_rpc_errors() -> None:
    with pytest.raises(ValueError):
        Chain.rpc("ftp://x", private_keys=["0x" + "11" * 32])
    with pytest.raises(ValueError):
        Chain.rpc("http://127.0.0.1:1")
    with pytest.raises(ConnectionError):
        Chain.rpc("http://127.0.0.1:1", private_keys=["0x" + "11" * 32], timeout=1)


@pytest.mark.integration
def test_rpc_checks_chain_id_on_a_live_node(anvil: AnvilNode) -> None:
    assert anvil.url.startswith("http://127.0.0.1:")
    chain = Chain.rpc(anvil.url, private_keys=anvil.keys[:1], chain_id=ANVIL_CHAIN_ID)
    assert chain.backend == "rpc" and chain.call_gas is None
    assert chain.w3.eth.get_balance(chain.aggregator.address) > 0
    with pytest.raises(ValueError, match="chain id"):
        Chain.rpc(anvil.url, private_keys=anvil.keys[:1], chain_id=1)


def test_old_transactions_are_found_through_the_index() -> None:
    """Receipts and logs of old transactions come from py-evm's transaction index, not from a
    scan of the chain (speed is measured in benchmarks, not asserted here)."""
    chain = Chain.embedded(seed=1, n_accounts=4)
    contract = chain.deploy(CHANNEL)
    clients = chain.accounts[1:]
    for client in clients:
        chain.transact(contract.functions.register(client.address, KEY), chain.aggregator)
    first = None
    for rnd in range(3):
        for client in clients:
            r = chain.transact(_submit(contract, rnd=rnd), client)
            first = first or r
        chain.transact(_finalize(contract, rnd), chain.aggregator)
    backend = chain.w3.provider.ethereum_tester.backend
    assert isinstance(backend, IndexedPyEVMBackend)
    # the first submission's receipt is still found, identical, after 12 more transactions
    again = chain.w3.eth.get_transaction_receipt(first["transactionHash"])
    assert again["blockNumber"] == first["blockNumber"] and again["status"] == 1
    logs = contract.events.Submitted().get_logs(from_block=0)
    assert len(logs) == 9 and [lg["args"]["round"] for lg in logs] == [0] * 3 + [1] * 3 + [2] * 3
