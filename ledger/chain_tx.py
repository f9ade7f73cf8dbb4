"""Single transactions for :class:`ledger.chain.Chain`: signed locally, sent raw, checked.

:class:`TxSender`, the base class of the chain's senders, signs a transaction with the sender's
key, sends it raw, waits for its receipt and checks ``status == 1``. A failure surfaces as
:class:`~ledger.chain_errors.LedgerRevert` whichever way the backend reports it (eth-tester's
``TransactionFailed``, web3's ``ContractLogicError`` or a mined receipt with status 0, whose
reason is recovered by replaying the transaction as a call).
"""

from __future__ import annotations

import time
from typing import Any

from eth_account.signers.local import LocalAccount
from eth_tester.exceptions import TransactionFailed
from web3.exceptions import ContractLogicError, TimeExhausted, TransactionNotFound

from ledger.chain_errors import ChainLost, LedgerRevert, revert_reason

#: seconds a node has to mine a transaction (web3's default)
RECEIPT_TIMEOUT_S = 120.0
#: seconds between two checks that the node still holds the sender's earlier transactions
NONCE_CHECK_S = 1.0


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
        receipt = self.wait_receipt(tx_hash, sender.address, tx["nonce"])
        if receipt["status"] != 1:
            raise LedgerRevert(self._replay_reason(tx, receipt), receipt)
        self.gas_log.append((label, int(receipt["gasUsed"])))
        return receipt

    def wait_receipt(self, tx_hash: Any, address: str, nonce: int) -> Any:
        """The receipt of the transaction ``tx_hash`` (``address``'s ``nonce``), polled.

        Unlike web3's wait, which waits its whole timeout for a transaction that can never be
        mined, this checks every :data:`NONCE_CHECK_S` seconds that the node counts the
        sender's transactions up to this one (a restarted devnet has forgotten them, and keeps
        a later nonce queued for ever).

        Raises
        ------
        ChainLost
            When the node's count of the sender's transactions is at most ``nonce``.
        TimeExhausted
            When the transaction is not mined within :data:`RECEIPT_TIMEOUT_S`.
        """
        start = time.monotonic()
        checked, delay = start, 0.002
        while True:
            try:
                return self.w3.eth.get_transaction_receipt(tx_hash)
            except TransactionNotFound:
                pass
            now = time.monotonic()
            if now - checked >= NONCE_CHECK_S:
                checked = now
                held = int(self.w3.eth.get_transaction_count(address, "pending"))
                if held <= nonce:
                    raise ChainLost(
                        f"the node counts {held} transactions of {address}, this run has sent "
                        f"{nonce + 1}: it no longer holds the run's chain (was it restarted?)"
                    )
            if now - start > RECEIPT_TIMEOUT_S:
                raise TimeExhausted(
                    f"transaction {bytes(tx_hash).hex()} was not mined in {RECEIPT_TIMEOUT_S:.0f} s"
                )
            time.sleep(delay)
            delay = min(2 * delay, 0.1)

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
