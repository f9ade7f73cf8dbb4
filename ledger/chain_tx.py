"""Single transactions for :class:`ledger.chain.Chain`: signed locally, sent raw, checked.

:class:`TxSender`, the base class of the chain's senders, signs a transaction with the sender's
key, sends it raw, waits for its receipt and checks ``status == 1``. A failure surfaces as
:class:`~ledger.chain_errors.LedgerRevert` whichever way the backend reports it (eth-tester's
``TransactionFailed``, web3's ``ContractLogicError`` or a mined receipt with status 0, whose
reason is recovered by replaying the transaction as a call).
"""

from __future__ import annotations

from typing import Any

from eth_account.signers.local import LocalAccount
from eth_tester.exceptions import TransactionFailed
from web3.exceptions import ContractLogicError

from ledger.chain_errors import LedgerRevert, revert_reason


class TxSender:
    """:meth:`transact` for :class:`ledger.chain.Chain`; uses its ``w3``, ``call_gas`` and
    ``gas_log`` attributes."""

    def _send(self, tx: dict[str, Any], sender: LocalAccount, label: str) -> Any:
        tx = dict(tx)
        tx["nonce"] = self.w3.eth.get_transaction_count(sender.address, "pending")
        try:
            if "gas" not in tx:
                tx["gas"] = self.w3.eth.estimate_gas(tx)
            signed = sender.sign_transaction(tx)
            tx_hash = self.w3.eth.send_raw_transaction(signed.raw_transaction)
        except (TransactionFailed, ContractLogicError) as exc:
            raise LedgerRevert(revert_reason(exc)) from exc
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
            return revert_reason(exc)
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
            raise LedgerRevert(revert_reason(exc)) from exc
        return self._send(tx, sender, fn.fn_name)
