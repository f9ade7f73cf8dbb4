"""The embedded devnet's py-evm backends: indexed transaction lookup, deterministic blocks.

eth-tester mines with wall-clock timestamps and a random ``mix_hash`` (``prevRandao``), and finds
a transaction by scanning the whole chain. :class:`IndexedPyEVMBackend` looks transactions up in
py-evm's own index and mines a whole batch of transactions as one block
(:meth:`IndexedPyEVMBackend.mine_transactions`); :class:`DeterministicBackend` makes every mined
block a pure function of its transactions: block ``n`` has timestamp ``genesis + 12 * n`` (one
post-merge slot), ``mix_hash = keccak(b"flchain-devnet" || uint256(n))`` and the zero coinbase.
The pending header already carries these values, so transactions see the same
``TIMESTAMP``/``PREVRANDAO`` as the sealed block. Both touch eth-tester internals, hence its exact
pin. The devnet's funded accounts (:func:`derive_accounts`) and its genesis manifest
(:func:`genesis_spec`) are pure functions of the run seed; :meth:`ledger.chain.Chain.embedded`
connects to it.
"""

from __future__ import annotations

import hashlib
import os
from importlib.metadata import version
from typing import Any

from eth.vm.forks import PragueVM
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_tester import PyEVMBackend
from eth_tester.backends.pyevm.main import (
    get_default_account_state,
    get_default_genesis_params,
    serialize_transaction,
    serialize_transaction_receipt,
)
from eth_tester.exceptions import TransactionNotFound as TesterTxNotFound
from eth_utils import keccak, to_canonical_address, to_checksum_address

#: Genesis timestamp of the embedded devnet (fixed so genesis is reproducible).
GENESIS_TIMESTAMP = 1_700_000_000
#: Seconds between consecutive devnet blocks (one post-merge slot).
BLOCK_TIME = 12
#: Fee recipient of every devnet block.
DEVNET_COINBASE = b"\x00" * 20
EXPORT_FORMAT = "fedsentry-devnet/1"


def derive_accounts(seed: int | str, n: int) -> list[LocalAccount]:
    """Deterministic accounts: private key i = sha256(``"flchain:{seed}:{i}"``).

    Parameters
    ----------
    seed : int or str
        Run seed.
    n : int
        Number of accounts.

    Returns
    -------
    list of LocalAccount
        Account 0 is the channel aggregator by convention.
    """
    return [
        Account.from_key(hashlib.sha256(f"flchain:{seed}:{i}".encode()).digest()) for i in range(n)
    ]


class IndexedPyEVMBackend(PyEVMBackend):
    """PyEVMBackend whose transaction lookups use py-evm's hash index.

    eth-tester 0.14 finds a transaction by scanning every block from the head
    down, so each receipt (and each log query, which fetches receipts) costs
    O(chain length) and a FLChain run of n submissions costs O(n^2).  py-evm's
    chain database already maps a transaction hash to (block, index); this
    subclass uses it and only scans the pending block.  It touches eth-tester
    internals (``serialize_*`` helpers), hence the exact eth-tester pin.
    """

    def _lookup(self, transaction_hash: bytes) -> tuple[Any, Any, int]:
        head = self.chain.get_block()
        for index, tx in enumerate(head.transactions):
            if tx.hash == transaction_hash:
                return head, tx, index
        try:
            number, index = self.chain.get_canonical_transaction_index(transaction_hash)
        except Exception as exc:  # py-evm's TransactionNotFound
            raise TesterTxNotFound(
                f"No transaction found for transaction hash: 0x{transaction_hash.hex()}"
            ) from exc
        block = self.chain.get_canonical_block_by_number(number)
        return block, block.transactions[index], index

    def block_kwargs(self) -> dict[str, Any]:
        """Header fields of the next mined block (overridden for reproducible chains)."""
        return {"coinbase": b"\x00" * 20, "mix_hash": os.urandom(32)}

    def mine_transactions(self, raw_transactions: list[bytes]) -> list[dict[str, Any]]:
        """Apply signed raw transactions and mine them as one block; returns their receipts
        (``transactionHash``, ``status``, ``gasUsed``, ``blockNumber``).

        One state-root computation and one transaction/receipt trie build per block, where
        applying them one by one (eth-tester's path) rebuilds both after every transaction.
        A transaction that reverts is mined with status 0; one that is invalid (bad nonce,
        no funds) raises and nothing is mined.
        """
        if self.chain.get_block().transactions:
            raise RuntimeError("pending block is not empty; mine it first")
        vm = self.chain.get_vm()
        txs = [vm.get_transaction_builder().decode(bytes(r)) for r in raw_transactions]
        result, receipts, _ = self.chain.mine_all(txs, **self.block_kwargs())
        number, out, prev = result.imported_block.number, [], 0
        for tx, r in zip(txs, receipts, strict=True):
            out.append(
                {
                    "transactionHash": tx.hash,
                    "status": 1 if r.state_root == b"\x01" else 0,
                    "gasUsed": r.gas_used - prev,
                    "blockNumber": number,
                }
            )
            prev = r.gas_used
        return out

    def get_transaction_by_hash(self, transaction_hash: bytes) -> Any:
        block, tx, index = self._lookup(transaction_hash)
        is_pending = block.number == self.chain.get_block().number
        return serialize_transaction(block, tx, index, is_pending)

    def get_transaction_receipt(self, transaction_hash: bytes) -> Any:
        block, tx, index = self._lookup(transaction_hash)
        is_pending = block.number == self.chain.get_block().number
        receipts = block.get_receipts(self.chain.chaindb)
        return serialize_transaction_receipt(
            block, receipts, tx, index, is_pending, self.chain.get_vm()
        )


def devnet_mix_hash(number: int) -> bytes:
    """``prevRandao`` of block ``number``: ``keccak(b"flchain-devnet" || uint256(number))``."""
    return keccak(b"flchain-devnet" + number.to_bytes(32, "big"))


class _DeterministicMining:
    """Mixin for eth-tester's py-evm chain class: deterministic headers, no wall clock."""

    def create_header_from_parent(self, parent_header: Any, **params: Any) -> Any:
        params.setdefault("timestamp", parent_header.timestamp + BLOCK_TIME)
        params.setdefault("mix_hash", devnet_mix_hash(parent_header.block_number + 1))
        params.setdefault("coinbase", DEVNET_COINBASE)
        return super().create_header_from_parent(parent_header, **params)  # type: ignore[misc]

    # eth-tester seals with a random mix_hash and its own coinbase: use the pending header's
    def mine_block_extended(self, *args: Any, **kwargs: Any) -> Any:
        pending = self.header  # type: ignore[attr-defined]
        kwargs.update(mix_hash=pending.mix_hash, coinbase=pending.coinbase)
        return super().mine_block_extended(*args, **kwargs)  # type: ignore[misc]

    def mine_all(self, txs: Any, *args: Any, parent_header: Any = None, **kwargs: Any) -> Any:
        pending = self.header  # type: ignore[attr-defined]
        if parent_header is not None:
            pending = self.create_header_from_parent(parent_header)
        kwargs.update(mix_hash=pending.mix_hash, coinbase=pending.coinbase)
        return super().mine_all(txs, *args, parent_header=parent_header, **kwargs)  # type: ignore


class DeterministicBackend(IndexedPyEVMBackend):
    """:class:`IndexedPyEVMBackend` whose mined blocks depend only on their transactions.

    Attributes
    ----------
    spec : dict or None
        The :func:`genesis_spec` it was built from (set by :meth:`from_spec`); needed to export.
    """

    spec: dict[str, Any] | None = None

    def reset_to_genesis(self, *args: Any, **kwargs: Any) -> None:
        super().reset_to_genesis(*args, **kwargs)
        base = type(self.chain)
        cls = type(f"Deterministic{base.__name__}", (_DeterministicMining, base), {})
        # re-open the same database; the first pending header is now deterministic too
        self.chain = cls(self.chain.chaindb.db)

    def block_kwargs(self) -> dict[str, Any]:
        """Seal fields for ``Chain.send_batch``'s one-block path: the pending header's."""
        return {"coinbase": self.chain.header.coinbase, "mix_hash": self.chain.header.mix_hash}

    def time_travel(self, to_timestamp: int) -> int:
        raise NotImplementedError("the deterministic devnet fixes timestamps by block number")

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> DeterministicBackend:
        """Build the genesis described by a :func:`genesis_spec` manifest (JSON form)."""
        params = {
            k: bytes.fromhex(v[2:]) if isinstance(v, str) else v
            for k, v in spec["genesis_params"].items()
        }
        state = {
            to_canonical_address(addr): {
                "balance": acct["balance"],
                "nonce": acct["nonce"],
                "code": bytes.fromhex(acct["code"][2:]),
                "storage": {int(k, 16): v for k, v in acct["storage"].items()},
            }
            for addr, acct in spec["alloc"].items()
        }
        backend = cls(genesis_parameters=params, genesis_state=state)
        fork = backend.chain.get_vm_class_for_block_number(0).fork
        if fork != spec["fork"]:
            raise ValueError(f"manifest fork {spec['fork']!r}, eth-tester runs {fork!r}")
        backend.spec = spec
        return backend


def genesis_spec(seed: int | str = 0, n_accounts: int = 10) -> dict[str, Any]:
    """JSON-serializable manifest to rebuild a devnet (:meth:`DeterministicBackend.from_spec`).

    Parameters
    ----------
    seed : int or str
        Seed of the funded accounts (see :func:`derive_accounts`).
    n_accounts : int
        Number of funded accounts.

    Returns
    -------
    dict
        Format tag, seed, fork, block rule, genesis header params (bytes as ``0x`` hex), the
        funded accounts (``alloc``) and the py-evm / eth-tester versions.
    """
    params = get_default_genesis_params({"timestamp": GENESIS_TIMESTAMP})
    alloc = {}
    for acct in derive_accounts(seed, n_accounts):
        st = get_default_account_state()
        alloc[acct.address] = {
            "balance": st["balance"],
            "nonce": st["nonce"],
            "code": "0x" + st["code"].hex(),
            "storage": {hex(k): v for k, v in st["storage"].items()},
        }
    return {
        "format": EXPORT_FORMAT,
        "seed": seed,
        "n_accounts": n_accounts,
        "backend": "eth-tester PyEVMBackend, ledger.devnet.DeterministicBackend",
        "fork": PragueVM.fork,
        "block_time": BLOCK_TIME,
        "mix_hash": "keccak(b'flchain-devnet' || uint256(number))",
        "coinbase": to_checksum_address(DEVNET_COINBASE),
        "genesis_params": {
            k: "0x" + v.hex() if isinstance(v, bytes) else v for k, v in params.items()
        },
        "alloc": alloc,
        "versions": {p: version(p) for p in ("py-evm", "eth-tester")},
    }
