"""Batched sending for :class:`ledger.chain.Chain`: a round's transactions in one block.

:class:`Call` is one transaction of a batch.  :class:`BatchSender`, a base class of ``Chain``,
signs the calls with locally tracked nonces and fixed gas, sends them together (straight into
py-evm's pending block on the embedded devnet, as raw transactions to a JSON-RPC node) and
checks every receipt, raising :class:`~ledger.chain_errors.LedgerRevert` on a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eth_account.signers.local import LocalAccount
from eth_tester.exceptions import TransactionFailed
from web3.contract import Contract
from web3.exceptions import ContractLogicError, Web3RPCError

from ledger.chain_errors import LedgerRevert, revert_reason
from ledger.chain_tx import TxSender

#: Gas cap for FLChain calls on the embedded devnet (submit/finalize use < 100k).
EMBEDDED_CALL_GAS = 300_000


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
    def of(
        cls,
        contract: Contract,
        fn_name: str,
        args: Sequence[Any],
        sender: LocalAccount,
        gas: int = EMBEDDED_CALL_GAS,
    ) -> Call:
        """A call of ``contract``'s function ``fn_name`` with ``args``, e.g.
        ``Call.of(c, "commit", [rnd, ...], aggregator)``."""
        return cls(
            sender, contract.address, contract.encode_abi(fn_name, args=list(args)), fn_name, gas
        )


class BatchSender(TxSender):
    """:meth:`send_batch` for :class:`ledger.chain.Chain`, kept apart from connecting and deploying.

    Uses the ``Chain`` attributes ``w3``, ``backend``, ``gas_log``, ``_nonces`` and
    ``_chain_id``, and
    :meth:`TxSender._replay_reason` for the reason of a status-0 receipt.
    """

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
        latest = self._latest()
        limit = int(latest["gasLimit"] * 0.9)
        out, chunk, used = [], [], 0
        for c in calls:  # one block holds at most ~90% of the block gas limit
            if chunk and used + c.gas > limit:
                out += self._send_block(chunk, latest)
                chunk, used, latest = [], 0, self._latest()
            chunk.append(c)
            used += c.gas
        return out + self._send_block(chunk, latest)

    def _latest(self) -> Any:
        """The latest block's ``gasLimit`` and ``baseFeePerGas``: on the embedded devnet read
        off py-evm's head (web3's ``get_block`` builds and validates the whole block through
        eth-tester: 1-3 ms of a robustness round's ~15 ms commit)."""
        if self.backend != "embedded":
            return self.w3.eth.get_block("latest")
        head = self.w3.provider.ethereum_tester.backend.chain.get_canonical_head()
        return {"gasLimit": head.gas_limit, "baseFeePerGas": head.base_fee_per_gas}

    def _send_block(self, calls: list[Call], latest: Any) -> list[Any]:
        if self._chain_id is None:  # a node's chain id does not change: asked once
            self._chain_id = int(self.w3.eth.chain_id)
        chain_id = self._chain_id
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
                tx = {
                    "to": c.to,
                    "data": c.data,
                    "value": c.value,
                    "gas": c.gas,
                    "nonce": self._nonces[addr],
                    "chainId": chain_id,
                    "type": 2,
                    **fees,
                }
                raw = c.sender.sign_transaction(tx).raw_transaction
                if evm is None:
                    hashes.append(self.w3.eth.send_raw_transaction(raw))
                raws.append(bytes(raw))
                self._nonces[addr] += 1
                txs.append({**tx, "from": addr})
            receipts = evm.mine_transactions(raws) if evm is not None else []
        except (TransactionFailed, ContractLogicError) as exc:
            self._nonces.clear()
            raise LedgerRevert(revert_reason(exc)) from exc
        except Web3RPCError as exc:  # the node refused the transaction (funds, nonce, gas)
            self._nonces.clear()
            raise LedgerRevert(
                f"{calls[len(txs)].label}: rejected by the node: {revert_reason(exc)}"
            ) from exc
        except Exception:
            self._nonces.clear()
            raise
        if evm is None:
            receipts = [
                self.wait_receipt(h, tx["from"], tx["nonce"])
                for h, tx in zip(hashes, txs, strict=True)
            ]
        for c, tx, r in zip(calls, txs, receipts, strict=True):
            if r["status"] != 1:
                self._nonces.clear()
                raise LedgerRevert(f"{c.label}: {self._replay_reason(tx, r)}", r)
            self.gas_log.append((c.label, int(r["gasUsed"])))
        return receipts
