"""FLChain ledger (Majeed & Hong 2019): every round of a run recorded on chain, and the audit.

``compile`` builds ``contracts/FLChain.vy`` offline with the pinned Vyper; ``chain`` sends locally
signed transactions to the embedded py-evm devnet (``pyevm``, exported and re-imported by
``devnet``) or to any JSON-RPC node; ``recorder`` is the round callback that writes updates,
signed records (``records``), Merkle roots (``merkle``) and BLS committee attestations
(``committee``) on and off chain (``store``); ``audit`` re-derives every global model from them
(``replay``) and reports each discrepancy; ``tamper`` holds the cases it must catch.
"""

from ledger.chain import Chain, LedgerRevert, derive_accounts
from ledger.compile import CompiledContract, compile_flchain, runtime_code_sha256
from ledger.pyevm import IndexedPyEVMBackend

__all__ = [
    "Chain",
    "CompiledContract",
    "IndexedPyEVMBackend",
    "LedgerRevert",
    "compile_flchain",
    "derive_accounts",
    "runtime_code_sha256",
]
