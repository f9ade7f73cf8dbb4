"""Chain backends for the FLChain ledger: an embedded devnet and any JSON-RPC node.

FLChain (Majeed & Hong 2019) records every client submission and every round
finalization on a per-channel contract.  :class:`Chain` hides the backend:

* :meth:`Chain.embedded` -- web3's ``EthereumTesterProvider`` over py-evm
  (:mod:`ledger.pyevm`) with a fixed genesis, seed-derived funded accounts and
  deterministic blocks, so runs are reproducible (:meth:`Chain.on_devnet` for a devnet
  rebuilt from its genesis manifest);
* :meth:`Chain.rpc` -- any node (anvil, hardhat, geth --dev ...) by URL.

Transactions are always signed locally and sent raw, and every receipt's
status is checked; failures surface as :class:`~ledger.chain_errors.LedgerRevert` whichever
way the backend reports them (eth-tester's ``TransactionFailed``, web3's
``ContractLogicError`` or a mined receipt with status 0).

This module holds the connection and deployment; single transactions
(:meth:`Chain.transact`) come from :mod:`ledger.chain_tx`, :meth:`Chain.send_batch` and its
:class:`~ledger.chain_batch.Call` from :mod:`ledger.chain_batch`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import eth_abi
from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_keys import keys
from eth_tester import EthereumTester, PyEVMBackend
from eth_tester.backends.pyevm.main import get_default_account_state, get_default_genesis_params
from eth_tester.exceptions import TransactionFailed
from eth_utils import to_checksum_address
from hexbytes import HexBytes
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import ContractLogicError
from web3.providers.eth_tester import EthereumTesterProvider

from ledger.chain_batch import EMBEDDED_CALL_GAS, BatchSender
from ledger.chain_errors import LedgerRevert, revert_reason
from ledger.compile import compile_flchain, runtime_code_sha256
from ledger.pyevm import GENESIS_TIMESTAMP, DeterministicBackend, derive_accounts, genesis_spec


def _reason(exc: BaseException) -> str:
    """The short cause of a failed connection (``[Errno 111] Connection refused``) rather than
    the HTTP stack's nested message; the message's first 160 characters when it has none."""
    found = re.search(r"\[Errno -?\d+\] [^\"')(]+", str(exc))
    return found.group(0).strip() if found else str(exc).splitlines()[0][:160]


#: the embedded devnet's gas limit for a deployment (a 32-member committee's uses 3.55M; only
#: the gas used is charged)
EMBEDDED_DEPLOY_GAS = 8_000_000

__all__ = ["Chain"]


@dataclass
class Chain(BatchSender):
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
    _chain_id: int | None = field(default=None, repr=False)

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
            spec = genesis_spec(seed, n_accounts)
            return cls.on_devnet(DeterministicBackend.from_spec(spec), spec)
        accounts = derive_accounts(seed, n_accounts)
        state = {bytes.fromhex(a.address[2:]): get_default_account_state() for a in accounts}
        params = get_default_genesis_params({"timestamp": GENESIS_TIMESTAMP})
        return cls._on_tester(
            PyEVMBackend(genesis_parameters=params, genesis_state=state), accounts
        )

    @classmethod
    def on_devnet(cls, backend: DeterministicBackend, spec: dict[str, Any]) -> Chain:
        """The embedded chain on ``backend``, a devnet built from the
        :func:`~ledger.pyevm.genesis_spec` manifest ``spec`` (a fresh genesis, or a devnet
        re-imported from an export), signing with the accounts of its seed."""
        return cls._on_tester(backend, derive_accounts(spec["seed"], spec["n_accounts"]))

    @classmethod
    def _on_tester(cls, backend: PyEVMBackend, accounts: list[LocalAccount]) -> Chain:
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
            raise ConnectionError(f"cannot reach JSON-RPC node at {url}: {_reason(exc)}") from exc
        if chain_id is not None and got != chain_id:
            raise ValueError(f"node at {url} has chain id {got}, expected {chain_id}")
        accounts = [Account.from_key(k) for k in private_keys]
        return cls(w3=w3, accounts=accounts, backend="rpc")

    @property
    def aggregator(self) -> LocalAccount:
        """Default aggregator account (``accounts[0]``)."""
        return self.accounts[0]

    def deploy(self, *constructor_args: Any, sender: LocalAccount | None = None) -> Contract:
        """Deploy one FLChain contract for a channel; ``sender`` becomes its aggregator.

        Parameters
        ----------
        *constructor_args
            The constructor's arguments, passed as they are: ``channel_id`` (32 bytes),
            ``committee`` (list of 128-byte EIP-2537 G1 keys, see
            :meth:`ledger.committee.Committee.pubkeys_eip2537`), ``quorum`` (int) and
            ``verify_signatures`` (bool).
        sender : LocalAccount, optional
            Aggregator; default ``accounts[0]``.

        Returns
        -------
        Contract
            Bound contract at the deployed address.

        Raises
        ------
        LedgerRevert
            The constructor refused the arguments (e.g. ``"bad key"``).
        """
        sender = sender or self.aggregator
        c = compile_flchain()
        factory = self.w3.eth.contract(abi=c.abi, bytecode=c.bytecode)
        params: dict[str, Any] = {"from": sender.address, "chainId": self.w3.eth.chain_id}
        ctor = factory.constructor(*constructor_args)
        try:
            if self.call_gas is not None:
                # the embedded devnet: one pre-flight run of the constructor (its revert
                # reason) and a fixed limit, instead of gas estimation's binary search
                # (~13 runs, ~60 ms of the recorder's CPU while round 0 trains)
                self.w3.eth.call({"from": sender.address, "data": ctor.data_in_transaction})
                params["gas"] = EMBEDDED_DEPLOY_GAS
            tx = ctor.build_transaction(params)
        except (TransactionFailed, ContractLogicError) as exc:  # the constructor reverted
            raise LedgerRevert(revert_reason(exc)) from exc
        receipt = self._send(tx, sender, "deploy")
        return self.w3.eth.contract(address=receipt["contractAddress"], abi=c.abi)

    def supports_bls_precompiles(self) -> bool:
        """Whether the node has the EIP-2537 BLS12-381 precompiles (Prague and later).

        Probes G1ADD (address ``0x0b``) with two points at infinity (256 zero bytes); the
        precompile answers the point at infinity (128 zero bytes), a node without it answers
        nothing (an empty account) or an error.
        """
        probe = {"to": "0x" + "00" * 19 + "0b", "data": "0x" + "00" * 256, "gas": 100_000}
        try:
            out = self.w3.eth.call(probe)
        except Exception:  # any refusal means "not available"
            return False
        return bytes(out) == bytes(128)

    def view(self, contract: Contract, name: str, *args: Any) -> Any:
        """The value of view function ``name(*args)`` of ``contract``, as web3's ``call()``
        gives it (a tuple when the function has several outputs). On the embedded devnet it
        goes to eth-tester directly (~3.5 ms a call, web3's middleware stack ~5.6 ms; the audit
        reads ~10 values a run). Raises what the call raises (a revert: eth-tester's
        ``TransactionFailed`` or web3's ``ContractLogicError``).
        """
        fn = getattr(contract.functions, name)(*args)
        if self.backend != "embedded":
            return fn.call()
        data = contract.encode_abi(name, args=list(args))
        tester = self.w3.provider.ethereum_tester
        raw = tester.call({"from": self.accounts[0].address, "to": contract.address, "data": data})
        kinds = [o["type"] for o in fn.abi["outputs"]]
        values = [
            to_checksum_address(v) if k == "address" else v
            for k, v in zip(kinds, eth_abi.decode(kinds, HexBytes(raw)), strict=True)
        ]
        return values[0] if len(values) == 1 else tuple(values)

    def code_sha256(self, address: str) -> str:
        """sha256 of the runtime code at ``address`` (compare with the compiled hash)."""
        return runtime_code_sha256(bytes(self.w3.eth.get_code(address)))

    def gas_used(self, label: str | None = None) -> list[int]:
        """Gas used by successful transactions, optionally of one function only."""
        return [g for name, g in self.gas_log if label is None or name == label]
