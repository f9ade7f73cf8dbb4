"""FLChain ledger (Majeed & Hong 2019): per-channel Vyper contract and chain backends.

``ledger.compile`` compiles ``contracts/FLChain.vy`` offline with the pinned
Vyper; ``ledger.chain`` deploys it and sends locally signed transactions to
the embedded py-evm devnet or to any JSON-RPC node.
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
