"""Incremental checkpoints of a :class:`~simulator.state.store.ClientStore` (its ``save`` and
``load``).

A store remembers, per checkpoint directory, a :class:`Lineage`: the manifest it last wrote or
loaded there (its lineage id, sequence number and row files) and the rows changed since.  A
save continues that manifest with a delta when the directory's manifest is still that one, and
writes a full snapshot otherwise.  Row files are removed only when neither the new manifest,
the manifest it replaced, nor the one this store last wrote or loaded there lists them, so the
manifest a caller recorded before the save stays loadable until its next save: the caller's own
checkpoint file, holding the returned manifest, is the commit point.  The file format is in
:mod:`simulator.state.files`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import DTypeLike

from simulator.state import files
from simulator.state.rows import StoreError
from simulator.state.table import ABSENT, Table
from simulator.state.tier import Tiers

__all__ = ["Lineage", "RowSink", "load_into", "save"]


@dataclass
class Lineage:
    """The manifest a store last wrote or loaded in one directory, and what changed since."""

    lineage: str
    seq: int
    names: frozenset[str]  # the row files that manifest lists
    dirty: dict[int, set[int]] = field(default_factory=dict)  # table index -> clients


class RowSink(Protocol):
    """What :func:`load_into` replays a checkpoint into: a new, empty
    :class:`~simulator.state.store.ClientStore`."""

    @property
    def tables(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]: ...

    def row_bytes(self, table: str) -> int: ...

    def declare(self, table: str, shape: tuple[int, ...], dtype: DTypeLike) -> None: ...

    def put(self, table: str, ids: np.ndarray, values: np.ndarray) -> None: ...

    def delete(self, table: str, ids: np.ndarray) -> None: ...


def save(tiers: Tiers, lineages: dict[str, Lineage], directory: str | Path) -> dict[str, Any]:
    """Write the rows of ``tiers`` into ``directory``; see :meth:`ClientStore.save`.

    ``lineages`` (checkpoint directory -> :class:`Lineage`) are the saving store's; the entry
    for ``directory`` is replaced by the manifest written."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    key = str(d.resolve())
    try:
        current = files.read_manifest(d)
    except StoreError:
        current = None  # unreadable: overwrite it with a fresh snapshot
    lin = lineages.get(key)
    decls = [t.decl() for t in tiers.tables]
    ours = (
        lin is not None
        and current is not None
        and current["lineage"] == lin.lineage
        and current["seq"] == lin.seq
    )
    seq = files.next_seq(d, current)
    live = sum(len(t.loc) * (t.row_bytes + 8) for t in tiers.tables)
    entries: list[dict[str, Any]]
    if ours:
        changes = {i: np.array(sorted(s), np.int64) for i, s in lin.dirty.items() if s}
        if not changes and current["tables"] == decls:
            return current
        split = {i: _split(tiers, tiers.tables[i], ids) for i, ids in changes.items()}
        payload = sum(
            len(p) * (tiers.tables[i].row_bytes + 8) + 8 * len(g) for i, (p, g) in split.items()
        )
        deltas = sum(e["payload"] for e in current["files"] if e["kind"] == "delta")
        entries = list(current["files"])
        if deltas + payload > 2 * live:
            ours = False
        elif split:
            entries.append(_write_rows(tiers, d, seq, "delta", split))
    if not ours:
        everything = {
            t.index: (np.sort(np.fromiter(t.loc, np.int64, len(t.loc))), np.empty(0, np.int64))
            for t in tiers.tables
        }
        entries = [_write_rows(tiers, d, seq, "snapshot", everything)]
    lineage = lin.lineage if lin is not None and ours else uuid.uuid4().hex
    manifest = {
        "format": files.FORMAT,
        "version": files.VERSION,
        "lineage": lineage,
        "seq": seq,
        "tables": decls,
        "files": entries,
        "live_payload": live,
    }
    files.write_manifest(d, manifest)
    names = frozenset(e["name"] for e in entries)
    keep = set(names)
    if current is not None:
        keep.update(e["name"] for e in current["files"])
    if lin is not None:
        keep.update(lin.names)
    files.remove_unreferenced(d, keep)
    lineages[key] = Lineage(lineage, seq, names)
    return manifest


def load_into(
    store: RowSink, directory: str | Path, manifest: dict[str, Any] | None = None
) -> tuple[str, Lineage]:
    """Replay into the new, empty ``store`` the checkpoint ``manifest`` (default: the one
    in ``directory``) lists; see :meth:`ClientStore.load`.

    Returns the resolved ``directory`` and the :class:`Lineage` of the manifest replayed, for
    the store to continue from."""
    d = Path(directory)
    if manifest is None:
        manifest = files.read_manifest(d)
        if manifest is None:
            raise StoreError(f"no checkpoint in {d}: {files.MANIFEST} is missing")
    else:
        manifest = files.check_manifest(manifest, f"the manifest given for {d}")
    for decl in manifest["tables"]:
        store.declare(decl["name"], tuple(decl["shape"]), np.dtype(decl["dtype"]))
    for entry in manifest["files"]:
        _replay(store, d / entry["name"], entry)
    return str(d.resolve()), Lineage(
        manifest["lineage"], manifest["seq"], frozenset(e["name"] for e in manifest["files"])
    )


def _split(tiers: Tiers, t: Table, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` split into (clients with a row, clients without)."""
    has = tiers.codes(t, ids) != ABSENT
    return ids[has], ids[~has]


def _write_rows(
    tiers: Tiers, d: Path, seq: int, kind: str, rows: dict[int, tuple[np.ndarray, np.ndarray]]
) -> dict[str, Any]:
    """Write one row file; ``rows`` maps table index -> (ids to write, ids deleted)."""
    members = []
    for i, (ids, gone) in sorted(rows.items()):
        t = tiers.tables[i]
        members += [
            (f"ids_{i}", np.dtype(np.int64), ids.shape, [ids]),
            (f"values_{i}", t.dtype, (len(ids), *t.shape), _blocks(tiers, t, ids)),
            (f"deleted_{i}", np.dtype(np.int64), gone.shape, [gone]),
        ]
    name = files.row_file_name(seq, kind)
    size = files.write_row_file(d, name, members)
    n_rows = sum(len(ids) for ids, _ in rows.values())
    n_gone = sum(len(gone) for _, gone in rows.values())
    payload = sum(
        len(ids) * (tiers.tables[i].row_bytes + 8) + 8 * len(gone)
        for i, (ids, gone) in rows.items()
    )
    return {
        "name": name,
        "kind": kind,
        "rows": n_rows,
        "deleted": n_gone,
        "payload": payload,
        "bytes": size,
    }


def _blocks(tiers: Tiers, t: Table, ids: np.ndarray) -> Iterator[np.ndarray]:
    step = files.block_rows(t.row_bytes)
    for start in range(0, len(ids), step):
        yield tiers.peek(t, ids[start : start + step])


def _replay(store: RowSink, path: Path, entry: dict[str, Any]) -> None:
    """Apply one row file of a checkpoint to the loading ``store``."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise StoreError(f"checkpoint file {path} is missing") from None
    if size != entry["bytes"]:
        raise StoreError(
            f"checkpoint file {path} has {size} bytes, the manifest says {entry['bytes']}"
        )
    with files.RowFileReader(path) as rd:
        # a table's index is its position in the declaration order
        for i, (name, (shape, dtype)) in enumerate(store.tables.items()):
            if f"deleted_{i}" in rd:
                store.delete(name, rd.read(f"deleted_{i}"))
            if f"ids_{i}" not in rd:
                continue
            ids = rd.read(f"ids_{i}")
            start = 0
            step = files.block_rows(store.row_bytes(name))
            for block in rd.blocks(f"values_{i}", dtype, shape, step):
                store.put(name, ids[start : start + len(block)], block)
                start += len(block)
            if start != len(ids):
                raise StoreError(
                    f"checkpoint file {path}: table {name!r} has {len(ids)} ids but {start} rows"
                )
