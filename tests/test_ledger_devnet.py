"""Tests for the deterministic devnet and its export / re-import (ledger/devnet.py,
ledger/devnet_import.py)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import rlp

from ledger.chain import Chain
from ledger.devnet import BLOCKS_FILE, GENESIS_FILE, ChainExporter, ChainExportError, export_chain
from ledger.devnet_import import import_chain
from ledger.pyevm import (
    BLOCK_TIME,
    GENESIS_TIMESTAMP,
    DeterministicBackend,
    devnet_mix_hash,
    genesis_spec,
)

CHANNEL, UPD, ROOT = b"\x01" * 32, b"\x03" * 32, b"\x04" * 32
ROUNDS = 3


def _commit(contract, rnd: int):
    return contract.functions.commit(
        rnd, UPD, ROOT, b"\x05" * 32, b"\x06" * 32, b"\x07" * 32, 0, b""
    )


def _run(chain: Chain, exporter: ChainExporter | None = None, sleep: float = 0.0):
    """Deploy (no committee), ROUNDS rounds of one commitment each; flush each round."""
    contract = chain.deploy(CHANNEL, [], 0, False)
    time.sleep(sleep)  # wall clock moves on between blocks
    rounds = []  # first and last block of each round
    for rnd in range(ROUNDS):
        receipt = chain.transact(_commit(contract, rnd), chain.aggregator)
        rounds.append((receipt["blockNumber"], receipt["blockNumber"]))
        if exporter is not None:
            exporter.flush()
    return contract, rounds


def _events(w3, contract) -> list[tuple]:
    bound = w3.eth.contract(address=contract.address, abi=contract.abi)
    return [
        (e["blockNumber"], e["args"]["round"], bytes(e["args"]["global_hash"]))
        for e in bound.events.Committed().get_logs(from_block=0)
    ]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One recorded run: (chain, contract, rounds, export directory)."""
    directory = tmp_path_factory.mktemp("export")
    chain = Chain.embedded(seed=3, n_accounts=5)
    exporter = ChainExporter(chain, directory)
    contract, rounds = _run(chain, exporter)
    return chain, contract, rounds, directory


def _records(directory: Path) -> list[bytes]:
    data, out, pos = (directory / BLOCKS_FILE).read_bytes(), [], 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        out.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return out


def _rewrite(directory: Path, records: list[bytes]) -> None:
    (directory / BLOCKS_FILE).write_bytes(b"".join(len(r).to_bytes(4, "big") + r for r in records))


@pytest.fixture()
def copy(exported, tmp_path) -> Path:
    return Path(shutil.copytree(exported[3], tmp_path / "copy"))


def _block_class():
    return DeterministicBackend.from_spec(genesis_spec(3, 5)).chain.get_vm().get_block_class()


def test_same_transactions_same_hashes_whatever_the_wall_clock(exported):
    chain, _, _, _ = exported
    other = Chain.embedded(seed=3, n_accounts=5)
    _run(other, sleep=1.1)
    head, again = chain.w3.eth.get_block("latest"), other.w3.eth.get_block("latest")
    assert head["number"] == again["number"] == 1 + ROUNDS
    assert head["hash"] == again["hash"]
    assert head["timestamp"] == GENESIS_TIMESTAMP + BLOCK_TIME * head["number"]
    assert bytes(head["mixHash"]) == devnet_mix_hash(head["number"])
    assert Chain.embedded(seed=4, n_accounts=5).w3.eth.get_block(0)["hash"] != head["hash"]


def test_every_sealing_path_follows_the_rule(tmp_path):
    chain = Chain.embedded(seed=3, n_accounts=2)
    backend = chain.w3.provider.ethereum_tester.backend
    backend.mine_blocks(1, coinbase=b"\x11" * 20)  # eth-tester's path (random mix_hash)
    backend.chain.mine_all([], coinbase=b"\x11" * 20, mix_hash=b"\x22" * 32)  # one-block batches
    for n in (1, 2):
        block = chain.w3.eth.get_block(n)
        assert bytes(block["mixHash"]) == devnet_mix_hash(n) and int(block["miner"], 16) == 0
        assert block["timestamp"] == GENESIS_TIMESTAMP + BLOCK_TIME * n
    with pytest.raises(NotImplementedError):
        backend.time_travel(GENESIS_TIMESTAMP + 10**6)
    assert export_chain(chain, tmp_path) == 2 and import_chain(tmp_path).ok


def test_genesis_spec_is_json_and_rebuilds_the_genesis():
    spec = genesis_spec(3, 5)
    again = json.loads(json.dumps(spec))
    assert again == spec and len(spec["alloc"]) == 5 and spec["fork"] == "prague"
    built = DeterministicBackend.from_spec(again).chain.get_canonical_head().hash
    chain = Chain.embedded(seed=3, n_accounts=5)
    assert bytes(chain.w3.eth.get_block(0)["hash"]) == built


def test_flush_is_incremental_and_append_only(exported, tmp_path):
    chain, _, _, directory = exported
    exporter = ChainExporter(chain, tmp_path / "again")
    assert exporter.flush() == chain.w3.eth.block_number and exporter.flush() == 0
    assert (tmp_path / "again" / BLOCKS_FILE).read_bytes() == (directory / BLOCKS_FILE).read_bytes()
    assert export_chain(chain, tmp_path / "once") == chain.w3.eth.block_number
    with pytest.raises(ChainExportError, match=r"Chain\.embedded\(\) \(indexed\)"):
        ChainExporter(Chain.embedded(seed=3, n_accounts=2, indexed=False), tmp_path / "no")


def test_reimport_matches_head_code_and_events(exported):
    chain, contract, _, directory = exported
    result = import_chain(directory)
    assert result.ok and result.blocks_imported == chain.w3.eth.block_number
    w3 = result.chain.w3
    assert result.head_hash == w3.eth.get_block("latest")["hash"].to_0x_hex()
    assert w3.eth.get_block("latest")["hash"] == chain.w3.eth.get_block("latest")["hash"]
    assert w3.eth.get_code(contract.address) == chain.w3.eth.get_code(contract.address)
    assert _events(w3, contract) == _events(chain.w3, contract) and len(_events(w3, contract)) == 3
    # the re-imported devnet keeps working
    bound = w3.eth.contract(address=contract.address, abi=contract.abi)
    assert bound.functions.current_round().call() == ROUNDS
    result.chain.transact(_commit(bound, ROUNDS), result.chain.aggregator)


def test_deleted_block_is_reported_at_its_number(exported, copy):
    records = _records(copy)
    del records[2]  # block #3
    _rewrite(copy, records)
    result = import_chain(copy)
    assert result.error.block_number == 3 and "missing" in result.error.message
    assert result.blocks_imported == 2 and result.chain.w3.eth.block_number == 2


@pytest.mark.parametrize("which", [0, ROUNDS - 1])
def test_deleted_round_is_caught(exported, copy, which):
    first, last = exported[2][which]
    records = _records(copy)
    del records[first - 1 : last]
    _rewrite(copy, records)
    result = import_chain(copy)
    assert result.error.block_number == first and result.blocks_imported == first - 1


def test_flipped_transaction_byte_is_caught(exported, copy):
    first = exported[2][1][0]  # round 1's commitment
    records = _records(copy)
    at = records[first - 1].index(UPD)
    records[first - 1] = records[first - 1][:at] + b"\x13" + records[first - 1][at + 1 :]
    _rewrite(copy, records)
    result = import_chain(copy)
    assert result.error.block_number == first
    assert result.blocks_imported == first - 1
    assert len(_events(result.chain.w3, exported[1])) == 1  # round 0 still queryable


@pytest.mark.parametrize(
    ("field", "delta"), [("gas_used", 1), ("extra_data", b"x"), ("state_root", b"\x00" * 32)]
)
def test_edited_header_is_caught_at_that_block(exported, copy, field, delta):
    records, n = _records(copy), exported[2][0][1]
    block = rlp.decode(records[n - 1], sedes=_block_class())
    value = getattr(block.header, field) + delta if field == "gas_used" else delta
    records[n - 1] = rlp.encode(block.copy(header=block.header.copy(**{field: value})))
    _rewrite(copy, records)
    error = import_chain(copy).error
    assert error.block_number == n and field in error.expected + error.found + error.message


def test_truncated_or_garbage_file_is_an_error(exported, copy):
    data = (copy / BLOCKS_FILE).read_bytes()
    (copy / BLOCKS_FILE).write_bytes(data[:-10])
    total = len(_records(copy))
    result = import_chain(copy)
    assert result.error.block_number == total and "truncated" in result.error.message
    _rewrite(copy, _records(copy)[:2] + [b"\xff" * 40])
    assert "RLP" in import_chain(copy).error.message


def test_bad_directory_and_genesis(copy, tmp_path):
    spec = json.loads((copy / GENESIS_FILE).read_text())
    spec["alloc"][next(iter(spec["alloc"]))]["balance"] += 1
    (copy / GENESIS_FILE).write_text(json.dumps(spec))
    result = import_chain(copy)
    assert result.chain is None and result.error.block_number == 0
    with pytest.raises(ChainExportError, match="genesis.json") as info:
        import_chain(tmp_path / "nowhere")
    assert "\n" not in str(info.value)


def test_keccak_goes_through_the_c_backend_unless_told_otherwise():
    """Importing the ledger selects safe-pysha3 for eth-hash; an ETH_HASH_BACKEND set before
    wins. keccak256("abc") is the Keccak-256 (not SHA3-256) test vector either way."""
    import os
    import subprocess
    import sys

    code = (
        "import ledger.chain\nfrom eth_hash.auto import keccak\n"
        "print(keccak(b'abc').hex(), keccak.hasher.__module__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "ETH_HASH_BACKEND"}
    want = "4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45"
    for given, backend in ((None, "pysha3"), ("pycryptodome", "pycryptodome")):
        run_env = env if given is None else {**env, "ETH_HASH_BACKEND": given}
        out = subprocess.run(
            [sys.executable, "-c", code], env=run_env, capture_output=True, text=True, check=True
        ).stdout.split()
        assert out == [want, f"eth_hash.backends.{backend}"]


def test_event_decoder_by_hand():
    """The audit's event decoder on a log written by hand: two static indexed inputs (an
    address, a uint) in the topics; bytes32, bool, dynamic bytes and an address in the data
    (head of 4 words, the bytes at offset 0x80: length 3, then b"abc" padded)."""
    from ledger.chain_events import _decoder

    abi = {
        "name": "E",
        "inputs": [
            {"name": "who", "type": "address", "indexed": True},
            {"name": "h", "type": "bytes32", "indexed": False},
            {"name": "n", "type": "uint256", "indexed": True},
            {"name": "ok", "type": "bool", "indexed": False},
            {"name": "blob", "type": "bytes", "indexed": False},
            {"name": "to", "type": "address", "indexed": False},
        ],
    }
    who = "0x" + "ab" * 20
    word = lambda x: x.to_bytes(32, "big")  # noqa: E731
    topics = [0, int(who, 16), 7]
    to = bytes.fromhex("00" * 12 + "cd" * 20)
    data = b"\x11" * 32 + word(1) + word(0x80) + to + word(3) + b"abc" + bytes(29)
    args = _decoder(abi)(topics, data)
    assert list(args) == ["who", "h", "n", "ok", "blob", "to"]
    assert args == {  # addresses checksummed (EIP-55), as web3 gives them
        "who": "0xABaBaBaBABabABabAbAbABAbABabababaBaBABaB",
        "h": b"\x11" * 32,
        "n": 7,
        "ok": True,
        "blob": b"abc",
        "to": "0xCdCDCdCdcdcdcdCdcDcDCdcDcDCdCdcdCdcDCDcD",
    }
    for bad in ({"type": "bytes", "indexed": True}, {"type": "tuple", "indexed": False}):
        with pytest.raises(ValueError, match="not decoded here"):
            _decoder({"name": "F", "inputs": [{"name": "x", **bad}]})
