"""Chain backends for the FLChain ledger: an embedded devnet and any JSON-RPC node.

FLChain (Majeed & Hong 2019) records every client submission and every round
finalization on a per-channel contract.  :class:`Chain` hides the backend:

* :meth:`Chain.embedded` -- web3's ``EthereumTesterProvider`` over py-evm
  (:mod:`ledger.pyevm`) with a fixed genesis, seed-derived funded accounts and
  deterministic blocks, so runs are reproducible;
* :meth:`Chain.rpc` -- any node (anvil, hardhat, geth --dev ...) by URL.

Transactions are always signed locally and sent raw, and every receipt's
status is checked; failures surface as :class:`LedgerRevert` whichever way the
backend reports them (eth-tester's ``TransactionFailed``, web3's
``ContractLogicError`` or a mined receipt with status 0).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_keys import keys
from eth_tester import EthereumTester, PyEVMBackend
from eth_tester.backends.pyevm.main import get_default_account_state, get_default_genesis_params
from eth_tester.exceptions import TransactionFailed
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import ContractLogicError, Web3RPCError
from web3.providers.eth_tester import EthereumTesterProvider

from ledger.compile import compile_flchain, runtime_code_sha256

#: Genesis timestamp of the embedded devnet (fixed so genesis is reproducible).
GENESIS_TIMESTAMP = 1_700_000_000
#: Gas cap for FLChain calls on the embedded devnet (submit/finalize use < 100k).
EMBEDDED_CALL_GAS = 300_000


class LedgerRevert(RuntimeError):
    """A ledger transaction was rejected by the FLChain contract or the node.

    Attributes
    ----------
    reason : str
        Revert reason (e.g. ``"not registered"``), normalized across backends.
    receipt : dict or None
        The status-0 receipt when the transaction was mined, else ``None``.
    """

    def __init__(self, reason: str, receipt: Any = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.receipt = receipt


def _reason(exc: BaseException) -> str:
    """Extract a bare revert reason from a backend exception."""
    msg = getattr(exc, "message", None) or (exc.args[0] if exc.args else str(exc))
    msg = str(msg)
    for prefix in ("execution reverted: ", "execution reverted:", "execution reverted"):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
            break
    return msg.strip() or "execution reverted"


@dataclass(frozen=True)
class Call:
    """One transaction of a :meth:`Chain.send_batch`.

    Attributes
    ----------
    sender : LocalAccount
        Signing account (a client submits from its own account).
    to : str
        Contract (or payee) address.
    data : str or bytes
        ABI-encoded call data (``b""`` for a plain transfer).
    label : str
        Name recorded in :attr:`Chain.gas_log` (the function name).
    gas : int
        Gas limit; only the gas used is charged.
    value : int
        Wei sent along.
    """

    sender: LocalAccount
    to: str
    data: str | bytes
    label: str
    gas: int = EMBEDDED_CALL_GAS
    value: int = 0

    @classmethod
    def of(cls, fn: Any, sender: LocalAccount, gas: int = EMBEDDED_CALL_GAS) -> Call:
        """A contract function call, e.g. ``Call.of(c.functions.submit(...), client)``."""
        return cls(sender, fn.address, fn._encode_transaction_data(), fn.fn_name, gas)


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


@dataclass
class Chain:
    """A web3 connection plus the local accounts that sign FLChain transactions.

    Attributes
    ----------
    w3 : Web3
        Connected web3 instance.
    accounts : list of LocalAccount
        Signing accounts; ``accounts[0]`` is the default aggregator.
    backend : str
        ``"embedded"`` or ``"rpc"``.
    call_gas : int or None
        Gas limit for contract calls sent by :meth:`transact` without an
        explicit ``gas``.  ``None`` estimates each transaction (one binary
        search, ~13 EVM runs on py-evm); the embedded devnet instead uses a
        fixed cap after a single ``eth_call`` pre-flight that surfaces revert
        reasons, ~2.5x faster.  Only gas actually used is charged either way.
    gas_log : list of (str, int)
        ``(function name, gas used)`` per successful transaction.
    """

    w3: Web3
    accounts: list[LocalAccount]
    backend: str = "embedded"
    call_gas: int | None = None
    gas_log: list[tuple[str, int]] = field(default_factory=list)
    _nonces: dict[str, int] = field(default_factory=dict, repr=False)

    @classmethod
    def embedded(cls, seed: int | str = 0, n_accounts: int = 10, indexed: bool = True) -> Chain:
        """Start an in-process devnet (py-evm) with a fixed genesis.

        Parameters
        ----------
        seed : int or str
            Seed for the funded accounts (see :func:`derive_accounts`).
        n_accounts : int
            Number of funded accounts (aggregator + clients).
        indexed : bool
            ``True`` (default): :class:`ledger.pyevm.DeterministicBackend` (O(1) transaction
            lookups, one block per :meth:`send_batch`, block hashes reproducible from the seed,
            exportable). ``False``: stock eth-tester (lookups scan the chain; kept to measure
            the difference; no :meth:`send_batch`).

        Returns
        -------
        Chain
        """
        if indexed:
            from ledger.pyevm import make_embedded_chain

            return make_embedded_chain(seed, n_accounts)
        accounts = derive_accounts(seed, n_accounts)
        state = {bytes.fromhex(a.address[2:]): get_default_account_state() for a in accounts}
        params = get_default_genesis_params({"timestamp": GENESIS_TIMESTAMP})
        backend = PyEVMBackend(genesis_parameters=params, genesis_state=state)
        # eth-tester lists (and defaults ``from`` to) its own unfunded keys 1..n
        # when a genesis state is given; make it list ours instead.
        backend.account_keys = tuple(keys.PrivateKey(a.key) for a in accounts)
        w3 = Web3(EthereumTesterProvider(EthereumTester(backend)))
        w3.eth.default_account = accounts[0].address
        return cls(w3=w3, accounts=accounts, backend="embedded", call_gas=EMBEDDED_CALL_GAS)

    @classmethod
    def rpc(
        cls,
        url: str,
        private_keys: list[str] | None = None,
        chain_id: int | None = None,
        timeout: float = 10.0,
    ) -> Chain:
        """Connect to a JSON-RPC node by URL.

        Parameters
        ----------
        url : str
            ``http(s)://`` endpoint.
        private_keys : list of str
            Funded keys to sign with (required; ``[0]`` is the aggregator).
        chain_id : int, optional
            Expected chain id; a mismatch raises ``ValueError``.
        timeout : float
            HTTP timeout in seconds.

        Returns
        -------
        Chain

        Raises
        ------
        ValueError
            Bad URL, missing keys or wrong chain id.
        ConnectionError
            Node unreachable.
        """
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"FLChain RPC URL must be http(s)://, got {url!r}")
        if not private_keys:
            raise ValueError("Chain.rpc needs at least one funded private key")
        w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": timeout}))
        try:
            got = w3.eth.chain_id
        except Exception as exc:
            raise ConnectionError(f"cannot reach JSON-RPC node at {url}: {exc}") from exc
        if chain_id is not None and got != chain_id:
            raise ValueError(f"node at {url} has chain id {got}, expected {chain_id}")
        accounts = [Account.from_key(k) for k in private_keys]
        return cls(w3=w3, accounts=accounts, backend="rpc")

    @property
    def aggregator(self) -> LocalAccount:
        """Default aggregator account (``accounts[0]``)."""
        return self.accounts[0]

    def _send(self, tx: dict[str, Any], sender: LocalAccount, label: str) -> Any:
        tx = dict(tx)
        tx["nonce"] = self.w3.eth.get_transaction_count(sender.address, "pending")
        try:
            if "gas" not in tx:
                tx["gas"] = self.w3.eth.estimate_gas(tx)
            signed = sender.sign_transaction(tx)
            tx_hash = self.w3.eth.send_raw_transaction(signed.raw_transaction)
        except (TransactionFailed, ContractLogicError) as exc:
            raise LedgerRevert(_reason(exc)) from exc
        receipt = self.w3.eth.wait_for_transaction_receipt(tx_hash)
        if receipt["status"] != 1:
            raise LedgerRevert(self._replay_reason(tx, receipt), receipt)
        self.gas_log.append((label, int(receipt["gasUsed"])))
        return receipt

    def _replay_reason(self, tx: dict[str, Any], receipt: Any) -> str:
        """Recover the reason of a status-0 transaction by re-running it as a call."""
        call = {k: tx[k] for k in ("from", "to", "data", "value") if k in tx}
        try:
            self.w3.eth.call(call, block_identifier=receipt["blockNumber"] - 1)
        except (TransactionFailed, ContractLogicError) as exc:
            return _reason(exc)
        except Exception:  # best effort only
            pass
        return "execution reverted (status 0)"

    def transact(self, fn: Any, sender: LocalAccount, gas: int | None = None) -> Any:
        """Sign locally, send raw, wait, and check ``status == 1``.

        Parameters
        ----------
        fn : ContractFunction
            Bound call, e.g. ``contract.functions.submit(0, h, 10, b)``.
        sender : LocalAccount
            Signing account (a client submits from its own account).
        gas : int, optional
            Explicit gas; skips estimation, so a revert mines with status 0.

        Returns
        -------
        AttributeDict
            The successful receipt.

        Raises
        ------
        LedgerRevert
            On any revert, however the backend reports it.
        """
        params: dict[str, Any] = {"from": sender.address, "chainId": self.w3.eth.chain_id}
        if gas is not None:
            params["gas"] = gas
        try:
            if gas is None and self.call_gas is not None:
                fn.call({"from": sender.address})  # pre-flight: revert reason, no mining
                params["gas"] = self.call_gas
            tx = fn.build_transaction(params)
        except (TransactionFailed, ContractLogicError) as exc:
            raise LedgerRevert(_reason(exc)) from exc
        return self._send(tx, sender, fn.fn_name)

    @staticmethod
    def _fees(latest: Any) -> dict[str, int]:
        """EIP-1559 fees that stay valid for a few blocks after ``latest``."""
        base = int(latest.get("baseFeePerGas") or 0)
        tip = 10**9
        return {"maxFeePerGas": 2 * base + tip, "maxPriorityFeePerGas": tip}

    def send_batch(self, calls: list[Call]) -> list[Any]:
        """Send many calls and check every receipt; on the embedded devnet they share one block.

        Nonces are tracked locally and gas is fixed per call (no estimate, no pre-flight), so a
        round's submissions cost one EVM run each. A reverted call mines with status 0; its
        reason is recovered by replaying it as a call and raised as :class:`LedgerRevert` once
        the whole batch is mined.

        Parameters
        ----------
        calls : list of Call
            What to send, in order (the order of the transactions in the block).

        Returns
        -------
        list of AttributeDict
            Receipts, in the order of ``calls``.
        """
        if not calls:
            return []
        latest = self.w3.eth.get_block("latest")
        limit = int(latest["gasLimit"] * 0.9)
        out, chunk, used = [], [], 0
        for c in calls:  # one block holds at most ~90% of the block gas limit
            if chunk and used + c.gas > limit:
                out += self._send_block(chunk, latest)
                chunk, used, latest = [], 0, self.w3.eth.get_block("latest")
            chunk.append(c)
            used += c.gas
        return out + self._send_block(chunk, latest)

    def _send_block(self, calls: list[Call], latest: Any) -> list[Any]:
        chain_id = self.w3.eth.chain_id
        fees = self._fees(latest)
        # embedded: straight to py-evm's pending block, one block mined for the whole batch
        # (eth-tester's own no-auto-mine mode snapshots and re-applies every transaction)
        evm = self.w3.provider.ethereum_tester.backend if self.backend == "embedded" else None
        txs, raws, hashes = [], [], []
        try:
            for c in calls:
                addr = c.sender.address
                if addr not in self._nonces:
                    self._nonces[addr] = self.w3.eth.get_transaction_count(addr, "pending")
                tx = {"to": c.to, "data": c.data, "value": c.value, "gas": c.gas,
                      "nonce": self._nonces[addr], "chainId": chain_id, "type": 2, **fees}
                raw = c.sender.sign_transaction(tx).raw_transaction
                if evm is None:
                    hashes.append(self.w3.eth.send_raw_transaction(raw))
                raws.append(bytes(raw))
                self._nonces[addr] += 1
                txs.append({**tx, "from": addr})
            receipts = evm.mine_transactions(raws) if evm is not None else []
        except (TransactionFailed, ContractLogicError) as exc:
            self._nonces.clear()
            raise LedgerRevert(_reason(exc)) from exc
        except Web3RPCError as exc:  # the node refused the transaction (funds, nonce, gas)
            self._nonces.clear()
            raise LedgerRevert(f"{calls[len(txs)].label}: rejected by the node: "
                               f"{_reason(exc)}") from exc
        except Exception:
            self._nonces.clear()
            raise
        if evm is None:
            receipts = [self.w3.eth.wait_for_transaction_receipt(h) for h in hashes]
        for c, tx, r in zip(calls, txs, receipts, strict=True):
            if r["status"] != 1:
                self._nonces.clear()
                raise LedgerRevert(f"{c.label}: {self._replay_reason(tx, r)}", r)
            self.gas_log.append((c.label, int(r["gasUsed"])))
        return receipts

    def deploy(self, channel_id: bytes, sender: LocalAccount | None = None) -> Contract:
        """Deploy one FLChain contract for a channel; ``sender`` becomes its aggregator.

        Parameters
        ----------
        channel_id : bytes
            32-byte channel (experiment / global model) id.
        sender : LocalAccount, optional
            Aggregator; default ``accounts[0]``.

        Returns
        -------
        Contract
            Bound contract at the deployed address.
        """
        sender = sender or self.aggregator
        c = compile_flchain()
        factory = self.w3.eth.contract(abi=c.abi, bytecode=c.bytecode)
        tx = factory.constructor(channel_id).build_transaction(
            {"from": sender.address, "chainId": self.w3.eth.chain_id}
        )
        receipt = self._send(tx, sender, "deploy")
        return self.w3.eth.contract(address=receipt["contractAddress"], abi=c.abi)

    def code_sha256(self, address: str) -> str:
        """sha256 of the runtime code at ``address`` (compare with the compiled hash)."""
        return runtime_code_sha256(bytes(self.w3.eth.get_code(address)))

    def gas_used(self, label: str | None = None) -> list[int]:
        """Gas used by successful transactions, optionally of one function only."""
        return [g for name, g in self.gas_log if label is None or name == label]
