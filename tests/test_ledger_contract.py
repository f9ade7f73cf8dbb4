"""Tests for the FLChain v2 channel contract, its compilation and the chain backend.

Every contract test runs on both backends: the embedded devnet (py-evm) and a real anvil node
(``integration``; one node per session, each test on an ``evm_snapshot`` reverted afterwards).
Signatures are not verified here (``verify_signatures=False``); on-chain BLS verification is
tested in ``test_ledger_onchain_bls.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from ledger_nodes import ANVIL_CHAIN_ID, AnvilNode, anvil_or_skip

import ledger.compile as compile_mod
from ledger.chain import EMBEDDED_DEPLOY_GAS, Chain
from ledger.chain_batch import EMBEDDED_CALL_GAS
from ledger.chain_errors import LedgerRevert
from ledger.chain_events import event_logs
from ledger.commitment import COMMIT_TAG, commit_message
from ledger.committee import Committee
from ledger.compile import EVM_VERSION, compile_flchain
from ledger.pyevm import IndexedPyEVMBackend, derive_accounts

CHANNEL = b"\x01" * 32
DIGESTS = [bytes([i]) * 32 for i in range(2, 7)]
SIG = b"\x09" * 256  # not checked with verify_signatures=False
GAS_BOUND = 120_000  # a commit without verification (measured ~76k, ~93k for the first)
COMMITTEE = Committee.from_seed(5, size=4)
KEYS = COMMITTEE.pubkeys_eip2537()


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
    return chain.deploy(CHANNEL, KEYS, 3, False)


def _commit(contract, rnd: int, signers: int = 0b1011, digests=DIGESTS):
    return contract.functions.commit(rnd, *digests, signers, SIG)


def test_compile_deterministic_and_cached(compiled) -> None:
    assert compiled.evm_version == EVM_VERSION == "shanghai"
    assert compiled.compiler_version.startswith("0.4.3")
    assert compile_flchain() is compiled
    compile_mod.compile_source.cache_clear()
    again = compile_flchain()
    assert again is not compiled
    assert again.runtime_sha256 == compiled.runtime_sha256
    assert again.bytecode == compiled.bytecode


def test_compile_disk_cache(tmp_path, monkeypatch: pytest.MonkeyPatch, compiled) -> None:
    monkeypatch.setenv("FEDSENTRY_CACHE", str(tmp_path))
    assert compile_mod.cache_dir() == tmp_path / "contracts"
    compile_mod.compile_source.cache_clear()
    first = compile_flchain()  # compiles and writes the entry
    (entry,) = (tmp_path / "contracts").iterdir()
    assert entry.name == f"FLChain-{compiled.source_sha256}-vyper0.4.3-shanghai.json"
    assert first == compiled

    def no_compiler(*_args: object) -> None:
        raise AssertionError("compiled again despite a cache entry")

    monkeypatch.setattr(compile_mod, "_compile_with_vyper", no_compiler)
    monkeypatch.setitem(sys.modules, "vyper", None)  # importing vyper now fails
    compile_mod.compile_source.cache_clear()
    assert compile_flchain() == compiled

    good = entry.read_text()
    tampered = {**json.loads(good), "runtime_bytecode": "0x00"}
    wrong_type = {**json.loads(good), "runtime_bytecode": 7}
    bad_entries = [
        "{not json",
        "[]",
        json.dumps({"abi": []}),
        json.dumps(tampered),
        json.dumps(wrong_type),
    ]
    for bad in bad_entries:
        entry.write_text(bad)
        compile_mod.compile_source.cache_clear()
        with pytest.raises(AssertionError, match="compiled again"):
            compile_flchain()  # a corrupt entry is not trusted
    monkeypatch.undo()
    monkeypatch.setenv("FEDSENTRY_CACHE", str(tmp_path))
    compile_mod.compile_source.cache_clear()
    assert compile_flchain() == compiled and entry.read_text() == good  # rewritten
    assert [p.name for p in entry.parent.iterdir()] == [entry.name]  # no temporary left
    compile_mod.compile_source.cache_clear()


def test_deploy_and_code_hash(chain: Chain, compiled, channel) -> None:
    f = channel.functions
    assert f.aggregator().call() == chain.aggregator.address
    assert f.channel_id().call() == CHANNEL
    assert f.current_round().call() == 0
    assert (f.quorum().call(), f.committee_size().call(), f.verify_signatures().call()) == (
        3,
        4,
        False,
    )
    assert [f.committee_key(i).call() for i in range(4)] == KEYS
    assert f.COMMIT_TAG().call() == COMMIT_TAG
    with pytest.raises(Exception, match="unknown signer"):
        f.committee_key(4).call()
    assert chain.code_sha256(channel.address) == compiled.runtime_sha256


def test_view_reads_what_web3_reads(chain: Chain, channel) -> None:
    """Chain.view gives web3's call() values and types (checksum address, bytes32, bool...)."""
    f, view = channel.functions, chain.view
    assert view(channel, "aggregator") == f.aggregator().call() == chain.aggregator.address
    assert view(channel, "channel_id") == CHANNEL
    got = [view(channel, n) for n in ("quorum", "committee_size", "verify_signatures")]
    assert got == [3, 4, False] and isinstance(got[2], bool)
    assert [view(channel, "committee_key", i) for i in range(4)] == KEYS
    assert view(channel, "message", 0, *DIGESTS) == f.message(0, *DIGESTS).call()
    with pytest.raises(Exception, match="unknown signer"):
        view(channel, "committee_key", 4)


def test_constructor_checks(chain: Chain) -> None:
    padded = bytearray(KEYS[1])
    padded[70] = 1  # y's zero padding
    off_curve = KEYS[0][:127] + bytes([KEYS[0][127] ^ 1])
    cases = [
        ((CHANNEL, [], 1, False), "empty committee"),
        ((CHANNEL, [], 0, True), "empty committee"),
        ((CHANNEL, KEYS, 0, False), "bad quorum"),
        ((CHANNEL, KEYS, 5, False), "bad quorum"),
        ((CHANNEL, [KEYS[0], KEYS[1][:127]], 1, False), "bad key"),
        ((CHANNEL, [KEYS[0], bytes(padded)], 1, False), "bad key"),
        ((CHANNEL, [KEYS[0], off_curve], 1, True), "bad key"),
        ((CHANNEL, [KEYS[0], bytes(128)], 1, True), "bad key"),
    ]
    for args, reason in cases:
        with pytest.raises(LedgerRevert, match=reason):
            chain.deploy(*args)
    chain.deploy(CHANNEL, [KEYS[0], off_curve], 1, False)  # keys unused without verification


def test_embedded_deploy_uses_a_fixed_gas_limit() -> None:
    """On the embedded devnet a deployment is one pre-flight call and the mined transaction,
    with a fixed gas limit: gas estimation's binary search ran the constructor ~13 times."""
    chain = Chain.embedded(seed=7, n_accounts=5)
    chain.w3.eth.estimate_gas = None  # an estimate would fail
    contract = chain.deploy(CHANNEL, KEYS, 3, False)
    tx = chain.w3.eth.get_transaction(chain.w3.eth.get_block(1)["transactions"][0])
    assert tx["gas"] == EMBEDDED_DEPLOY_GAS
    assert chain.gas_used("deploy")[0] < EMBEDDED_DEPLOY_GAS // 2  # only the gas used is charged
    assert contract.functions.quorum().call() == 3


def test_commit_records_and_emits(chain: Chain, channel) -> None:
    expected = commit_message(chain.w3.eth.chain_id, channel.address, CHANNEL, 0, *DIGESTS)
    assert channel.functions.message(0, *DIGESTS).call() == expected
    receipt = chain.transact(_commit(channel, 0), chain.aggregator)
    (ev,) = channel.events.Committed().process_receipt(receipt)
    args = ev["args"]
    assert args["round"] == 0
    names = ["global_hash", "submissions_root", "verdicts_hash", "admitted_root", "pack_id"]
    assert [args[n] for n in names] == DIGESTS
    assert (args["signers"], args["signature"], args["message"]) == (0b1011, SIG, expected)
    assert channel.functions.commitments(0).call() == expected
    if chain.backend == "embedded":  # the audit's decoder reads the same event (and its gas)
        ((logged, gas),) = event_logs(chain, channel.events.Committed(), channel.address)
        assert logged == dict(args) and gas == receipt["gasUsed"]
    assert channel.functions.current_round().call() == 1
    other = [DIGESTS[0], b"\xaa" * 32, *DIGESTS[2:]]
    chain.transact(_commit(channel, 1, 0b1111, other), chain.aggregator)
    msg1 = commit_message(chain.w3.eth.chain_id, channel.address, CHANNEL, 1, *other)
    assert channel.functions.commitments(1).call() == msg1 != expected


@pytest.mark.parametrize("mode", ["preflight", "estimate", "explicit-gas"])
def test_rules_rejected(chain: Chain, channel, mode: str) -> None:
    gas = 150_000 if mode == "explicit-gas" else None
    if mode == "estimate":
        chain.call_gas = None  # eth_estimateGas path, the RPC default
    elif mode == "preflight":
        chain.call_gas = EMBEDDED_CALL_GAS  # eth_call pre-flight + fixed cap, the embedded default
    agg, outsider = chain.aggregator, chain.accounts[1]
    with pytest.raises(LedgerRevert, match="not aggregator") as info:
        chain.transact(_commit(channel, 0), outsider, gas=gas)
    if gas is not None:  # explicit gas: mined with status 0, reason recovered
        assert info.value.receipt is not None and info.value.receipt["status"] == 0
    with pytest.raises(LedgerRevert, match="out of order"):
        chain.transact(_commit(channel, 1), agg, gas=gas)
    for signers in (0b10011, 1 << 255):
        with pytest.raises(LedgerRevert, match="unknown signer"):
            chain.transact(_commit(channel, 0, signers), agg, gas=gas)
    for signers in (0b0101, 0b1000, 0):
        with pytest.raises(LedgerRevert, match="no quorum"):
            chain.transact(_commit(channel, 0, signers), agg, gas=gas)
    assert channel.functions.current_round().call() == 0
    chain.transact(_commit(channel, 0, 0b0111), agg, gas=gas)
    with pytest.raises(LedgerRevert, match="out of order"):  # one commitment per round
        chain.transact(_commit(channel, 0), agg, gas=gas)
    assert channel.functions.current_round().call() == 1


def test_empty_committee(chain: Chain) -> None:
    contract = chain.deploy(CHANNEL, [], 0, False)
    assert contract.functions.committee_size().call() == 0
    with pytest.raises(LedgerRevert, match="unknown signer"):
        chain.transact(_commit(contract, 0, 1), chain.aggregator)
    chain.transact(contract.functions.commit(0, *DIGESTS, 0, b""), chain.aggregator)
    assert contract.functions.current_round().call() == 1


def test_gas_bounds(chain: Chain, channel) -> None:
    for rnd in range(3):
        chain.transact(_commit(channel, rnd), chain.aggregator)
    commits = chain.gas_used("commit")
    print(f"\ncommit gas without verification ({chain.backend}): {commits}")
    assert len(commits) == 3 and all(0 < g < GAS_BOUND for g in commits)


def test_supports_bls_precompiles_on_the_embedded_chain(monkeypatch) -> None:
    chain = Chain.embedded(seed=1, n_accounts=2)
    assert chain.supports_bls_precompiles()  # py-evm's Prague VM has them (in pure Python)
    monkeypatch.setattr(chain.w3.eth, "call", lambda *a, **k: b"")  # a node without them
    assert not chain.supports_bls_precompiles()

    def refuse(*_a: object, **_k: object) -> bytes:
        raise ValueError("unsupported")

    monkeypatch.setattr(chain.w3.eth, "call", refuse)
    assert not chain.supports_bls_precompiles()


def test_embedded_is_reproducible() -> None:
    a, b = Chain.embedded(seed=3, n_accounts=3), Chain.embedded(seed=3, n_accounts=3)
    assert [x.address for x in a.accounts] == [x.address for x in b.accounts]
    assert a.w3.eth.get_block(0)["hash"] == b.w3.eth.get_block(0)["hash"]
    assert a.deploy(CHANNEL, KEYS, 3, False).address == b.deploy(CHANNEL, KEYS, 3, False).address
    assert derive_accounts(3, 1)[0].address != derive_accounts(4, 1)[0].address


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
    contract = chain.deploy(CHANNEL, KEYS, 3, False)
    first = None
    for rnd in range(6):
        r = chain.transact(_commit(contract, rnd), chain.aggregator)
        first = first or r
    backend = chain.w3.provider.ethereum_tester.backend
    assert isinstance(backend, IndexedPyEVMBackend)
    again = chain.w3.eth.get_transaction_receipt(first["transactionHash"])
    assert again["blockNumber"] == first["blockNumber"] and again["status"] == 1
    logs = contract.events.Committed().get_logs(from_block=0)
    assert [lg["args"]["round"] for lg in logs] == list(range(6))
