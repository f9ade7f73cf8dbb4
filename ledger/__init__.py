"""FLChain ledger (Majeed & Hong 2019), v2: every round of a run committed on chain, and the audit.

A run's driver hands each round to the recorder process (``recorder`` -> ``host`` ->
``session``): the edge committee re-derives the round's global model (``replay``) and signs the
round's commitment with BLS (``committee``, ``commitment``), every client signs its update
record (``records``), the round's updates, records, verdicts and global model go into one
content-addressed pack (``pack``, ``round_build``) and ONE transaction commits the round's Merkle
roots (``merkle``) to the channel's contract (``contracts/FLChain.vy``, compiled by ``compile``)
on the embedded py-evm devnet (``pyevm``, ``devnet``) or any JSON-RPC node (``chain``). ``audit``
re-validates all of it and re-derives every global model; ``tamper`` holds the cases it must
catch; ``proof`` gives a client its inclusion proof.

Modules are imported where used: the driver of a run imports only ``recorder``, ``host`` and
``errors``, not the chain stack.
"""

import importlib.util
import os

# Ethereum's keccak-256 (every trie node, address and transaction hash of py-evm) through the C
# backend of safe-pysha3 when installed: ~1 us a call against ~7 us for pycryptodome, which
# eth-hash picks first; the devnet's block import runs ~15% faster. An ETH_HASH_BACKEND already
# set wins. eth-hash reads the variable at its first hash, which comes after this import.
if importlib.util.find_spec("sha3") is not None:
    os.environ.setdefault("ETH_HASH_BACKEND", "pysha3")
