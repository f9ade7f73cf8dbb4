"""One store for all per-client state, sized by the clients that have state.

Algorithms keep rows per client between rounds (FedDyn's ``h_k``, SCAFFOLD's ``c_i``, MOON's
previous model, FedBN's BatchNorm, personalised models...).  :class:`ClientStore` holds them
in named tables of fixed-shape rows.  Memory is O(clients with a row): RAM rows sit in one
array per table (with a free list of its slots), and past a byte budget the least recently used
rows (across tables) spill to disk, written by a background thread
(:mod:`simulator.state.tier`).  Every call works on its ids with dict lookups and vectorised
numpy gathers/scatters; nothing is proportional to the number of clients in the store.

``save(directory)`` writes an incremental checkpoint (only rows changed or deleted since the
previous save to that directory) and returns its manifest; ``ClientStore.load`` replays it, or
an older manifest given explicitly, bit for bit (:mod:`simulator.state.checkpoint`, file format
in :mod:`simulator.state.files`).  The store is not thread-safe.
"""

from __future__ import annotations

from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from simulator.state import checkpoint
from simulator.state.rows import StoreError, as_ids, as_values, check_declaration, check_unique
from simulator.state.table import ABSENT, Table
from simulator.state.tier import Tiers

__all__ = ["ClientStore"]


class ClientStore:
    """Per-client rows in named tables, within a RAM budget, spilling to disk beyond it.

    Parameters
    ----------
    memory_bytes
        Budget in bytes for the row arrays held in RAM across all tables.  The store never
        allocates past it: ``memory_bytes_used <= memory_bytes`` always holds (stricter than
        "budget plus one growth chunk": geometric growth is clipped at the budget, and spare
        capacity of other tables is released when one needs room).  Not counted: the
        bookkeeping (a dict entry per row, an LRU entry per RAM row, ~100-200 bytes each;
        8 bytes per RAM slot plus a list entry per free one) and the buffers evicted rows are
        gathered into for the spill files' background writes (per table at most two, each
        the size of the largest recent eviction from it, kept for reuse).
    spill_dir
        Directory for the spill files; the store makes a private subdirectory in it on the
        first spill and removes it on :meth:`close`.  None forbids spilling: a put that would
        pass the budget raises :class:`StoreError`.

    Notes
    -----
    "Used" for the LRU order means read by :meth:`get` or written by :meth:`put`; ``has``,
    ``save`` and the like do not count.  Rows are kept bit for bit; values of another dtype
    are converted to the table's with ``same_kind`` casting.
    """

    def __init__(self, memory_bytes: int, spill_dir: str | Path | None = None) -> None:
        if (
            not isinstance(memory_bytes, Integral)
            or isinstance(memory_bytes, bool)
            or memory_bytes < 0
        ):
            raise StoreError(f"memory_bytes must be an integer >= 0, got {memory_bytes!r}")
        spill_root = None if spill_dir is None else Path(spill_dir)
        if spill_root is not None and spill_root.is_file():
            raise StoreError(f"spill_dir {spill_root} is a file, not a directory")
        self._tiers = Tiers(int(memory_bytes), spill_root)
        self._tables: dict[str, Table] = {}
        self._lineages: dict[str, checkpoint.Lineage] = {}  # checkpoint directory -> lineage
        self._closed = False

    def declare(self, table: str, shape: tuple[int, ...], dtype: DTypeLike = np.float32) -> None:
        """Declare ``table`` with rows of ``shape`` (``()`` for a scalar) and ``dtype``.

        Re-declaring with the same shape and dtype does nothing; with another one it raises
        :class:`StoreError`.  Rows must hold at least one element of a numeric or bool dtype.
        """
        self._check_open()
        shape, dt = check_declaration(table, shape, dtype)
        old = self._tables.get(table)
        if old is not None:
            if old.shape != shape or old.dtype != dt:
                raise StoreError(
                    f"table {table!r} is declared with shape {old.shape} and dtype "
                    f"{old.dtype}, not shape {shape} and dtype {dt}"
                )
            return
        self._tables[table] = self._tiers.add_table(table, shape, dt)

    @property
    def tables(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Declared tables: name -> (row shape, dtype), in declaration order."""
        return {t.name: (t.shape, t.dtype) for t in self._tiers.tables}

    def row_bytes(self, table: str) -> int:
        """Bytes of one row of ``table``."""
        return self._table(table).row_bytes

    # ------------------------------------------------------------------ reads

    def get(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``ids`` in ``table``: ``(values [len(ids), *shape], present [len(ids)])``.

        ``values`` is a new array, zeros where a client has no row; ``present`` says whether
        each client has one.  Spilled rows are read from disk and moved back to RAM as far as
        the budget allows (evicting the least recently used others), in the order of ``ids``.
        """
        t = self._table(table)
        return self._tiers.read(t, as_ids(ids))

    def has(self, table: str, ids: np.ndarray) -> np.ndarray:
        """Bool array: whether each client of ``ids`` has a row in ``table``."""
        t = self._table(table)
        return self._tiers.codes(t, as_ids(ids)) != ABSENT

    def resident(self, table: str, ids: np.ndarray) -> np.ndarray:
        """Bool array: whether each client's row of ``table`` is in RAM (not spilled)."""
        t = self._table(table)
        return self._tiers.codes(t, as_ids(ids)) >= 0

    def __contains__(self, item: object) -> bool:
        """``"table" in store``: declared?  ``("table", client) in store``: has a row?"""
        if isinstance(item, str):
            return item in self._tables
        table, client = item  # type: ignore[misc]
        return bool(self.has(table, np.array([client]))[0])

    def count(self, table: str | None = None) -> int:
        """Rows in ``table``, or in all tables when None."""
        if table is None:
            return sum(len(t.loc) for t in self._tiers.tables)
        return len(self._table(table).loc)

    @property
    def memory_bytes(self) -> int:
        """The RAM budget given at construction."""
        return self._tiers.budget

    @property
    def memory_bytes_used(self) -> int:
        """Bytes allocated for RAM rows (array capacity, all tables); <= ``memory_bytes``."""
        return self._tiers.memory_bytes_used()

    @property
    def disk_bytes_used(self) -> int:
        """Bytes of the spill files (their allocated size, free slots included)."""
        return sum(t.disk.nbytes for t in self._tiers.tables if t.disk is not None)

    # ------------------------------------------------------------------ writes

    def put(self, table: str, ids: np.ndarray, values: np.ndarray) -> None:
        """Store ``values[j]`` as the row of client ``ids[j]`` (``ids`` must be unique).

        Raises :class:`StoreError` for unknown tables, repeated ids, values of the wrong
        shape, and, without a spill directory, when the new rows would pass the budget.
        """
        t = self._table(table)
        ids = as_ids(ids)
        check_unique(t, ids)
        values = as_values(t, values, len(ids))
        codes = self._tiers.codes(t, ids)
        if not self._tiers.spilling:
            new = int((codes == ABSENT).sum())
            need = self._tiers.data_bytes() + new * t.row_bytes
            if need > self._tiers.budget:
                raise StoreError(
                    f"table {t.name!r}: {new} new rows need {need} bytes of RAM in all, over "
                    f"memory_bytes={self._tiers.budget}; give a spill_dir or a larger budget"
                )
        self._tiers.write(t, ids, values, codes)
        self._mark_dirty(t, ids)

    def delete(self, table: str, ids: np.ndarray) -> None:
        """Remove the rows of ``ids`` from ``table``; clients without a row are ignored."""
        t = self._table(table)
        clients = [c for c in dict.fromkeys(as_ids(ids).tolist()) if c in t.loc]
        if clients:
            self._tiers.remove(t, clients)
            self._mark_dirty(t, clients)

    # ------------------------------------------------------------------ checkpoints

    def save(self, directory: str | Path) -> dict[str, Any]:
        """Write an incremental checkpoint into ``directory`` (created if needed).

        Returns the manifest now in ``directory`` (a small JSON-able dict): record it in the
        run's own checkpoint and pass it to :meth:`load` to make that checkpoint the commit
        point.  The first save to a directory (or one whose manifest is not the one this store
        last wrote or loaded there) writes a full snapshot.  Later saves write a delta file with
        the rows changed or deleted since; when the deltas' payload (row bytes plus 8 per id)
        would pass twice the live data's, a full snapshot replaces them.  The manifest is
        replaced last and atomically.  Row files are removed only when listed by none of the
        new manifest, the one it replaced and the one this store last wrote or loaded there,
        so the previous manifest stays loadable.  Without changes it writes nothing and returns
        the current manifest.  Saving does not count as a use for the LRU order.
        """
        self._check_open()
        return checkpoint.save(self._tiers, self._lineages, directory)

    @classmethod
    def load(
        cls,
        directory: str | Path,
        memory_bytes: int,
        spill_dir: str | Path | None = None,
        manifest: dict[str, Any] | None = None,
    ) -> ClientStore:
        """A new store with the rows of the checkpoint in ``directory``, bit for bit.

        Parameters
        ----------
        directory
            A directory written by :meth:`save`.
        memory_bytes, spill_dir
            As for the constructor; they need not match the saving store's.
        manifest
            A manifest returned by :meth:`save` to ``directory``: replay exactly the files it
            lists, whatever manifest the directory holds now (the directory keeps the files of
            its current manifest and the one before).  None: the directory's current manifest.

        The row files are replayed in order into fresh spill files (old ones are never reused).
        A later :meth:`save` to the same directory continues incrementally when the directory's
        manifest is the one loaded, and writes a full snapshot otherwise.
        """
        store = cls(memory_bytes, spill_dir)
        try:
            store.restore(directory, manifest)
        except BaseException:
            store.close()
            raise
        return store

    def restore(self, directory: str | Path, manifest: dict[str, Any] | None = None) -> None:
        """Replay into this new, empty store the checkpoint in ``directory`` (its current
        manifest, or ``manifest``); :meth:`load` is a new store plus this."""
        self._check_open()
        if self._tables:
            raise StoreError(
                f"restore needs a new, empty store; this one has the tables {list(self._tables)}"
            )
        key, lineage = checkpoint.load_into(self, directory, manifest)
        self._lineages[key] = lineage

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Drop all rows and remove the spill files; the store is unusable afterwards."""
        if not self._closed:
            self._closed = True
            self._tiers.close()

    def __enter__(self) -> ClientStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"ClientStore({self.count()} rows in {len(self._tables)} tables, "
            f"{self.memory_bytes_used}/{self.memory_bytes} RAM bytes, "
            f"{self.disk_bytes_used} disk bytes)"
        )

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the store is closed")

    def _table(self, table: str) -> Table:
        self._check_open()
        t = self._tables.get(table)
        if t is None:
            raise StoreError(f"unknown table {table!r}; declare it first")
        return t

    def _mark_dirty(self, t: Table, ids: np.ndarray | list[int]) -> None:
        if self._lineages:
            clients = ids.tolist() if isinstance(ids, np.ndarray) else ids
            for lin in self._lineages.values():
                lin.dirty.setdefault(t.index, set()).update(clients)
