"""Re-import of an exported devnet (:mod:`ledger.devnet`), for audits and resumes.

:func:`import_chain` rebuilds the genesis from ``genesis.json``, then imports every record of
``blocks.rlp`` with py-evm's full validation (after checking that it extends its parent and
keeps the devnet's rule for the header fields a block producer chooses), stopping at the first
bad block and naming what was expected and what was found; blocks cut off at the end show
against ``head.json``, which must be there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rlp

from ledger.chain import Chain
from ledger.devnet import BLOCKS_FILE, GENESIS_FILE, HEAD_FILE, ChainExportError, hex_of
from ledger.pyevm import DeterministicBackend

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
            return f"{name}={hex_of(want)}", f"{name}={hex_of(got)}"
    return hex_of(rebuilt.hash), hex_of(block.hash)


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
                hex_of(parent.hash),
                hex_of(block.header.parent_hash),
                f"block #{n} does not extend block #{n - 1} (parent hash)",
            )
        template = evm.create_header_from_parent(parent)
        for name in _RULE_FIELDS:
            want, got = getattr(template, name, None), getattr(block.header, name, None)
            if want != got:
                return ImportErrorInfo(
                    n, hex_of(want), hex_of(got), f"block #{n} header {name} breaks the devnet rule"
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
    if type(number) is not int or number < 0:
        raise ChainExportError(f"malformed {HEAD_FILE}: number {number!r}")
    if number > head.block_number:
        return ImportErrorInfo(
            head.block_number + 1,
            f"head #{number} {digest}",
            f"head #{head.block_number} {hex_of(head.hash)}",
            f"blocks #{head.block_number + 1}..#{number} missing at the end",
        )
    # blocks past the recorded head are tolerated (a crash between append and head.json)
    found = hex_of(evm.get_canonical_block_hash(number))
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
        ``genesis.json``, ``blocks.rlp`` or ``head.json`` missing or unreadable (an exporter
        writes all three when it starts, so an export without its head is incomplete).
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
    if (hex_of(genesis.hash), evm.chain_id) != recorded:
        err = ImportErrorInfo(
            0,
            f"{recorded[0]} chain {recorded[1]}",
            f"{hex_of(genesis.hash)} chain {evm.chain_id}",
            "genesis rebuilt from genesis.json does not match its recorded hash",
        )
        return ImportResult(None, 0, None, err)
    # the head the exporter wrote last: without it blocks cut off at the end would not show
    want_head = _read_json(d / HEAD_FILE)
    error = _import_blocks(evm, data)
    head = evm.get_canonical_head()
    if error is None:
        error = _check_head(evm, want_head)
    return ImportResult(
        Chain.on_devnet(backend, manifest), head.block_number, hex_of(head.hash), error
    )
