"""Export / re-import of the reproducible embedded devnet's blocks, for audits.

eth-tester mines with wall-clock timestamps and a random ``mix_hash``
(``prevRandao``), so identical runs give different block hashes.
:class:`~ledger.pyevm.DeterministicBackend` makes every mined block a pure function of
its transactions: block ``n`` has timestamp ``genesis + 12 * n`` (one
post-merge slot), ``mix_hash = keccak(b"flchain-devnet" || uint256(n))`` and
the zero coinbase.  The pending header already carries these values, so the
transactions see the same ``TIMESTAMP``/``PREVRANDAO`` as the sealed block.

:class:`ChainExporter` writes ``genesis.json`` (the :func:`~ledger.pyevm.genesis_spec`
manifest plus the genesis hash) and appends each new canonical block to
``blocks.rlp`` as a record ``uint32 big-endian length || rlp(block)``;
``head.json`` is rewritten with the exported head on each flush. Blocks are appended one
record at a time (:class:`simulator.run.appendlog.AppendLog`): a kill mid-write leaves a truncated
last record, which a resume drops (:func:`simulator.run.appendlog.drop_torn_tail`).
:func:`ledger.devnet_import.import_chain` rebuilds the genesis and imports every block with
py-evm's full validation, stopping at the first bad block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import rlp

from ledger.chain import Chain
from ledger.pyevm import DeterministicBackend
from ledger.store import write_json_atomic
from simulator.run.appendlog import AppendLog

GENESIS_FILE, BLOCKS_FILE, HEAD_FILE = "genesis.json", "blocks.rlp", "head.json"


class ChainExportError(ValueError):
    """A chain export directory is unusable (missing or malformed file)."""


def _devnet(chain: Chain) -> DeterministicBackend:
    backend = getattr(getattr(chain.w3.provider, "ethereum_tester", None), "backend", None)
    if not isinstance(backend, DeterministicBackend) or backend.spec is None:
        raise ChainExportError("only a devnet from Chain.embedded() (indexed) can be exported")
    return backend


def hex_of(value: Any) -> str:
    return "0x" + bytes(value).hex() if isinstance(value, bytes) else str(value)


class ChainExporter:
    """Append-only export of a devnet: ``genesis.json`` once, new blocks on each :meth:`flush`.

    Parameters
    ----------
    chain : Chain
        A devnet chain (:meth:`Chain.embedded`, :meth:`Chain.on_devnet`).
    directory : str or Path
        Created if needed; an existing export there is replaced, unless ``append``.
    fsync : bool
        ``os.fsync`` ``blocks.rlp`` after each flush.
    append : bool
        Continue the export in ``directory`` (``chain`` was re-imported from it): nothing is
        rewritten, the next flush appends the blocks after its recorded head.
    """

    def __init__(
        self, chain: Chain, directory: str | Path, fsync: bool = False, append: bool = False
    ) -> None:
        backend = _devnet(chain)
        self._evm, self.directory, self.fsync = backend.chain, Path(directory), fsync
        self.directory.mkdir(parents=True, exist_ok=True)
        genesis = self._evm.get_canonical_block_header_by_number(0)
        self.exported, self._last_hash = 0, genesis.hash
        if append:  # continue an export this chain was re-imported from: keep every byte
            # the chain holds exactly the blocks of blocks.rlp (head.json may lag one flush
            # behind: a kill between the two writes), so the export goes on from its head
            head = self._evm.get_canonical_head()
            self.exported, self._last_hash = head.block_number, head.hash
            write_json_atomic(
                self.directory / HEAD_FILE, {"number": self.exported, "hash": hex_of(head.hash)}
            )
        else:
            manifest = {
                **backend.spec,
                "chain_id": self._evm.chain_id,
                "genesis_hash": hex_of(genesis.hash),
            }
            write_json_atomic(self.directory / GENESIS_FILE, manifest)
            (self.directory / BLOCKS_FILE).write_bytes(b"")
            write_json_atomic(
                self.directory / HEAD_FILE, {"number": 0, "hash": hex_of(genesis.hash)}
            )
        self._log = AppendLog(self.directory / BLOCKS_FILE, "records")

    def flush(self) -> int:
        """Append the canonical blocks mined since the last flush; returns how many."""
        head = self._evm.get_canonical_head()
        if self._evm.get_canonical_block_hash(self.exported) != self._last_hash:
            raise ChainExportError(f"chain reorganized below exported block #{self.exported}")
        if head.block_number <= self.exported:
            return 0
        for n in range(self.exported + 1, head.block_number + 1):
            data = rlp.encode(self._evm.get_canonical_block_by_number(n))
            self._log.append(len(data).to_bytes(4, "big") + data)
        if self.fsync:
            self._log.sync()
        count = head.block_number - self.exported
        self.exported, self._last_hash = head.block_number, head.hash
        write_json_atomic(
            self.directory / HEAD_FILE, {"number": self.exported, "hash": hex_of(head.hash)}
        )
        return count

    def close(self) -> None:
        """Close the export's block file."""
        self._log.close()


def export_chain(chain: Chain, directory: str | Path) -> int:
    """One-shot export of a whole devnet; returns the number of blocks written."""
    exporter = ChainExporter(chain, directory)
    try:
        return exporter.flush()
    finally:
        exporter.close()
