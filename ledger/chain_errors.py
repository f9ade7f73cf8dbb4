"""How the FLChain ledger reports a rejected transaction, whichever backend rejected it.

:class:`LedgerRevert` is what :class:`ledger.chain.Chain` raises for eth-tester's
``TransactionFailed``, web3's ``ContractLogicError``, a node refusing a transaction or a mined
receipt with status 0; :func:`revert_reason` reduces a backend's message to the bare reason.
"""

from __future__ import annotations

from typing import Any


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


class ChainLost(RuntimeError):
    """The node no longer holds the transactions a run sent it: its nonce for a sender is below
    the run's (a devnet restarted, or another node behind the same URL). The run's next
    transaction can never be mined there."""


def revert_reason(exc: BaseException) -> str:
    """Extract a bare revert reason from a backend exception."""
    msg = getattr(exc, "message", None) or (exc.args[0] if exc.args else str(exc))
    msg = str(msg)
    for prefix in ("execution reverted: ", "execution reverted:", "execution reverted"):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
            break
    return msg.strip() or "execution reverted"
