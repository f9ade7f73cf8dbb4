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
:func:`import_chain` rebuilds the genesis and imports every block with
py-evm's full validation, stopping at the first bad block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rlp

from ledger.chain import Chain
from ledger.pyevm import DeterministicBackend
from ledger.store import write_json_atomic
from simulator.run.appendlog import AppendLog

GENESIS_FILE, BLOCKS_FILE, HEAD_FILE = "genesis.json", "blocks.rlp", "head.json"
# Header fields fixed by the devnet rule or by the parent; py-evm re-derives the rest
# (roots, bloom, gas used) by re-executing the block.
_RULE_FIELDS = (
    "coinbase",
    "timestamp",
    "mix_hash",
    "extra_data",
    "gas_limit",
    "difficulty",
    "nonce",
    "uncles_hash",
    "base_fee_per_gas",
    "excess_blob_gas",
    "parent_beacon_block_root",
)


class ChainExportError(ValueError):
    """A chain export directory is unusable (missing or malformed file)."""


def _devnet(chain: Chain) -> DeterministicBackend:
    backend = getattr(getattr(chain.w3.provider, "ethereum_tester", None), "backend", None)
    if not isinstance(backend, DeterministicBackend) or backend.spec is None:
        raise ChainExportError("only a devnet from Chain.embedded() (indexed) can be exported")
    return backend


def _hex(value: Any) -> str:
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
                self.directory / HEAD_FILE, {"number": self.exported, "hash": _hex(head.hash)}
            )
        else:
            manifest = {
                **backend.spec,
                "chain_id": self._evm.chain_id,
                "genesis_hash": _hex(genesis.hash),
            }
            write_json_atomic(self.directory / GENESIS_FILE, manifest)
            (self.directory / BLOCKS_FILE).write_bytes(b"")
            write_json_atomic(self.directory / HEAD_FILE, {"number": 0, "hash": _hex(genesis.hash)})
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
            self.directory / HEAD_FILE, {"number": self.exported, "hash": _hex(head.hash)}
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


@dataclass
class ImportErrorInfo:
    """Why re-import stopped: the first bad block, what was expected and what was found."""

    block_number: int
    expected: str
    found: str
    message: str


@dataclass
class ImportResult:
    """Outcome of :func:`import_chain`.

    ``chain`` is the re-imported devnet (its valid prefix on error; ``None`` when the genesis
    does not match), ``blocks_imported`` counts blocks after genesis, ``head_hash`` is the last
    imported block's ``0x`` hash and ``error`` is ``None`` when the whole export is valid.
    """

    chain: Chain | None
    blocks_imported: int
    head_hash: str | None
    error: ImportErrorInfo | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise ChainExportError(f"chain export is missing {path}") from None
    except (OSError, ValueError) as exc:
        raise ChainExportError(f"unreadable {path}: {exc}") from None
    if not isinstance(obj, dict):
        raise ChainExportError(f"unreadable {path}: not a JSON object")
    return obj


def _records(data: bytes) -> Any:
    """Yield ``(payload, None)`` per record, or ``(None, reason)`` once for a damaged tail."""
    pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        if pos + 4 + size > len(data):
            yield (
                None,
                f"truncated record at byte {pos}: {size} bytes announced, "
                f"{max(0, len(data) - pos - 4)} present",
            )
            return
        yield data[pos + 4 : pos + 4 + size], None
        pos += 4 + size


def _diagnose(evm: Any, parent: Any, block: Any) -> tuple[str, str]:
    """Re-execute ``block`` on ``parent`` and name the first header field that differs."""
    vm = evm.get_vm(evm.create_header_from_parent(parent).copy(gas_used=block.header.gas_used))
    try:
        rebuilt = vm.import_block(block).block.header
    except Exception as exc:  # invalid signature, nonce, gas ...
        return "valid transactions", f"{type(exc).__name__}: {exc}"
    for name, want in rebuilt.as_dict().items():
        got = getattr(block.header, name)
        if got != want:
            return f"{name}={_hex(want)}", f"{name}={_hex(got)}"
    return _hex(rebuilt.hash), _hex(block.hash)


def _import_blocks(evm: Any, data: bytes) -> ImportErrorInfo | None:
    for payload, damage in _records(data):
        parent = evm.get_canonical_head()
        n = parent.block_number + 1
        if damage is not None:
            return ImportErrorInfo(n, f"block #{n}", "truncated record", damage)
        try:
            sedes = evm.get_vm_class_for_block_number(n).get_block_class()
            block = rlp.decode(payload, sedes=sedes)
        except Exception as exc:
            return ImportErrorInfo(n, f"block #{n}", "undecodable record", f"bad RLP: {exc}")
        if block.number != n:
            what = "missing from the export" if block.number > n else "duplicated or out of order"
            return ImportErrorInfo(n, f"block #{n}", f"block #{block.number}", f"block #{n} {what}")
        if block.header.parent_hash != parent.hash:
            return ImportErrorInfo(
                n,
                _hex(parent.hash),
                _hex(block.header.parent_hash),
                f"block #{n} does not extend block #{n - 1} (parent hash)",
            )
        template = evm.create_header_from_parent(parent)
        for name in _RULE_FIELDS:
            want, got = getattr(template, name, None), getattr(block.header, name, None)
            if want != got:
                return ImportErrorInfo(
                    n, _hex(want), _hex(got), f"block #{n} header {name} breaks the devnet rule"
                )
        try:
            evm.import_block(block)
        except Exception as exc:
            expected, found = _diagnose(evm, parent, block)
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return ImportErrorInfo(n, expected, found, f"block #{n} invalid: {reason}")
    return None


def _check_head(evm: Any, want: dict[str, Any]) -> ImportErrorInfo | None:
    """Compare the imported chain with ``head.json`` (catches blocks cut off at the end)."""
    head = evm.get_canonical_head()
    number, digest = want.get("number"), want.get("hash")
    if not isinstance(number, int) or number < 0:
        raise ChainExportError(f"malformed {HEAD_FILE}: number {number!r}")
    if number > head.block_number:
        return ImportErrorInfo(
            head.block_number + 1,
            f"head #{number} {digest}",
            f"head #{head.block_number} {_hex(head.hash)}",
            f"blocks #{head.block_number + 1}..#{number} missing at the end",
        )
    # blocks past the recorded head are tolerated (a crash between append and head.json)
    found = _hex(evm.get_canonical_block_hash(number))
    if found != digest:
        return ImportErrorInfo(
            number,
            str(digest),
            found,
            f"block #{number} differs from the head recorded in {HEAD_FILE}",
        )
    return None


def import_chain(directory: str | Path) -> ImportResult:
    """Rebuild a devnet from an export and re-validate every block.

    Parameters
    ----------
    directory : str or Path
        Written by :class:`ChainExporter` / :func:`export_chain`.

    Returns
    -------
    ImportResult
        The chain (queryable through ``chain.w3``) up to the first invalid block.

    Raises
    ------
    ChainExportError
        ``genesis.json`` or ``blocks.rlp`` missing or unreadable.
    """
    d = Path(directory)
    manifest = _read_json(d / GENESIS_FILE)
    try:
        data = (d / BLOCKS_FILE).read_bytes()
    except OSError as exc:
        raise ChainExportError(f"chain export is missing {d / BLOCKS_FILE}: {exc}") from None
    try:
        backend = DeterministicBackend.from_spec(manifest)
        recorded = (manifest["genesis_hash"], manifest["chain_id"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ChainExportError(f"malformed {d / GENESIS_FILE}: {exc!r}") from None
    evm = backend.chain
    genesis = evm.get_canonical_head()
    if (_hex(genesis.hash), evm.chain_id) != recorded:
        err = ImportErrorInfo(
            0,
            f"{recorded[0]} chain {recorded[1]}",
            f"{_hex(genesis.hash)} chain {evm.chain_id}",
            "genesis rebuilt from genesis.json does not match its recorded hash",
        )
        return ImportResult(None, 0, None, err)
    error = _import_blocks(evm, data)
    head = evm.get_canonical_head()
    if error is None and (d / HEAD_FILE).exists():
        error = _check_head(evm, _read_json(d / HEAD_FILE))
    return ImportResult(
        Chain.on_devnet(backend, manifest), head.block_number, _hex(head.hash), error
    )
