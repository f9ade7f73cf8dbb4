"""The RAM and disk tiers behind :class:`simulator.state.store.ClientStore`, and their LRU order.

Each table (:class:`~simulator.state.table.Table`) keeps its RAM rows in the slots of one array
that grows geometrically (clipped at the budget here), with a list of its free slots and a dict
client -> slot code.  Rows never move inside RAM while they stay there: a row leaving RAM frees
its slot, and the next row to enter takes it.  Past the byte budget the least recently used rows
(across tables) move to a spill file per table (:class:`~simulator.state.spill.SpillFile`); a
spilled row read again moves back to RAM when it fits.  A put of ``k`` new rows into a full
store costs one gather of the ``k`` evicted rows (handed to the spill file, which writes them in
the background) and one scatter of the new rows into the slots the evicted ones left.  Every
operation works on its ids with dict lookups and vectorised numpy gathers/scatters; nothing is
proportional to the number of clients stored.  Arguments are validated by the caller
(:class:`~simulator.state.store.ClientStore`).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections import OrderedDict
from pathlib import Path

import numpy as np

from simulator.state.spill import SpillFile
from simulator.state.table import ABSENT, Table

MIN_GROW_ROWS = 16  # smallest RAM growth step (clipped to the budget)


class Tiers:
    """The tables' rows in RAM within ``budget`` bytes, spilling to ``spill_root`` beyond it.

    Without a spill root nothing is ever spilled and no LRU order is kept; the caller checks
    the budget before writing.  "Used" for the LRU order means read by :meth:`read` or written
    by :meth:`write`.
    """

    def __init__(self, budget: int, spill_root: Path | None) -> None:
        self.budget = budget
        self.spill_root = spill_root
        self.tables: list[Table] = []  # by index
        self._lru: OrderedDict[tuple[int, int], None] = OrderedDict()  # RAM rows, oldest first
        self._spill_path: Path | None = None
        self._cleanup: weakref.finalize | None = None

    @property
    def spilling(self) -> bool:
        return self.spill_root is not None

    def add_table(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Table:
        t = Table(
            len(self.tables),
            name,
            shape,
            dtype,
            dtype.itemsize * int(np.prod(shape, dtype=np.int64)),
        )
        self.tables.append(t)
        return t

    def codes(self, t: Table, ids: np.ndarray) -> np.ndarray:
        """Slot code of each of ``ids`` in ``t`` (``ABSENT`` for clients without a row)."""
        get = t.loc.get
        return np.array([get(c, ABSENT) for c in ids.tolist()], np.int64).reshape(len(ids))

    def data_bytes(self) -> int:
        """Bytes of the rows in RAM (not the arrays' capacity)."""
        return sum(t.n * t.row_bytes for t in self.tables)

    def memory_bytes_used(self) -> int:
        return sum(t.cap * t.row_bytes for t in self.tables)

    def read(self, t: Table, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``ids`` (zeros where absent) and whether present; promotes spilled rows."""
        codes = self.codes(t, ids)
        ram = codes >= 0
        present = codes != ABSENT
        on_disk = present & ~ram
        if ram.all():
            values = t.ram[codes]
        else:
            values = np.zeros((len(ids), *t.shape), t.dtype)
            if ram.any():
                values[ram] = t.ram[codes[ram]]
            if on_disk.any():
                values[on_disk] = t.disk.read(~codes[on_disk])
        self._touch(t, ids[ram])
        if self.spilling and on_disk.any():
            slots, first = np.unique(~codes[on_disk], return_index=True)  # repeated ids
            order = np.argsort(first)  # promote in the order of ids
            slots, pos = slots[order], np.flatnonzero(on_disk)[first[order]]
            r = self._room_for(t, len(pos), int(ram.sum()))
            if r:
                t.disk.release(slots[:r])
                self._admit(t, ids[pos[:r]], _rows_at(values, pos[:r]))
        return values, present

    def peek(self, t: Table, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids`` (all present) without touching the LRU order."""
        codes = self.codes(t, ids)
        values = np.empty((len(ids), *t.shape), t.dtype)
        ram = codes >= 0
        values[ram] = t.ram[codes[ram]]
        if not ram.all():
            values[~ram] = t.disk.read(~codes[~ram])
        return values

    def write(self, t: Table, ids: np.ndarray, values: np.ndarray, codes: np.ndarray) -> None:
        """Store ``values[j]`` as the row of the unique ``ids[j]``, whose codes are ``codes``."""
        ram = codes >= 0
        if ram.all():
            t.ram[codes] = values
            self._touch(t, ids)
            return
        if ram.any():
            t.ram[codes[ram]] = values[ram]
            self._touch(t, ids[ram])
        rest = np.flatnonzero(~ram)
        r = self._room_for(t, len(rest), int(ram.sum()))
        to_ram, to_disk = rest[:r], rest[r:]
        moving = codes[to_ram]
        moving = moving[moving != ABSENT]
        if len(moving):  # spilled rows coming back: their disk slots are free again
            t.disk.release(~moving)
        if len(to_disk):
            stay = to_disk[codes[to_disk] != ABSENT]
            if len(stay):
                t.disk.write(~codes[stay], values[stay])
            fresh = to_disk[codes[to_disk] == ABSENT]
            if len(fresh):
                slots = self._disk(t).alloc(len(fresh))
                t.disk.write(slots, values[fresh])
                t.loc.update(zip(ids[fresh].tolist(), (~slots).tolist(), strict=True))
        if r:
            self._admit(t, ids[to_ram], _rows_at(values, to_ram))

    def remove(self, t: Table, clients: list[int]) -> None:
        """Drop the rows of ``clients`` (unique, all present) from ``t``."""
        codes = np.array([t.loc.pop(c) for c in clients], np.int64)
        in_ram = codes >= 0
        if in_ram.any():
            if self.spilling:
                pop = self._lru.pop
                for c in np.asarray(clients)[in_ram].tolist():
                    pop((t.index, c))
            slots = codes[in_ram]
            t.free.extend(slots.tolist())
            t.n -= len(slots)
            if t.cap > MIN_GROW_ROWS and t.n <= t.cap // 4:  # give memory back geometrically
                t.shrink(max(2 * t.n, MIN_GROW_ROWS))
        if not in_ram.all():
            t.disk.release(~codes[~in_ram])

    def close(self) -> None:
        """Drop all rows and remove the spill files."""
        for t in self.tables:
            if t.disk is not None:
                t.disk.close()
            t.clear_ram()
            t.loc = {}
        self._lru.clear()
        if self._cleanup is not None:
            self._cleanup()

    # ------------------------------------------------------------------ internals

    def _touch(self, t: Table, ids: np.ndarray) -> None:
        if not self.spilling:
            return
        move, i = self._lru.move_to_end, t.index
        for c in ids.tolist():
            move((i, c))

    def _room_for(self, t: Table, want: int, protected: int) -> int:
        """How many of ``want`` rows of ``t`` may join RAM beside ``protected`` RAM rows."""
        if not self.spilling:
            return want
        return max(0, min(want, (self.budget - protected * t.row_bytes) // t.row_bytes))

    def _admit(self, t: Table, ids: np.ndarray, values: np.ndarray) -> None:
        """Place the rows of ``ids`` (unique, none in RAM, admitted by :meth:`_room_for`) in
        free RAM slots of ``t``, spilling least recently used rows first to make room."""
        k = len(ids)
        if self.spilling:
            self._evict(self.data_bytes() + k * t.row_bytes - self.budget)
        self._reserve(t, k)
        free = t.free
        taken = free[len(free) - k :]
        del free[len(free) - k :]
        slots = np.array(taken, np.int64)
        t.ram[slots] = values
        t.owner[slots] = ids
        clients = ids.tolist()
        t.loc.update(zip(clients, taken, strict=True))
        t.n += k
        if self.spilling:
            i = t.index
            self._lru.update(((i, c), None) for c in clients)

    def _evict(self, deficit: int) -> None:
        """Spill least recently used RAM rows (any table) until ``deficit`` bytes are free.

        Per table, the victims are gathered from RAM once and written to disk slots allocated
        together (one consecutive run unless freed disk slots are reused); their RAM slots
        become free for the rows that caused the eviction."""
        if deficit <= 0:
            return
        victims: dict[int, list[int]] = {}
        pop, tables = self._lru.popitem, self.tables
        while deficit > 0:
            (i, c), _ = pop(last=False)
            victims.setdefault(i, []).append(c)
            deficit -= tables[i].row_bytes
        for i, clients in victims.items():
            u = tables[i]
            loc = u.loc
            freed = [loc[c] for c in clients]
            disk = self._disk(u).alloc(len(freed))
            rows = u.disk.scratch(len(freed))
            # mode="wrap" (the slots are valid): with "raise", numpy copies via a temporary
            np.take(u.ram, np.array(freed, np.int64), axis=0, out=rows, mode="wrap")
            u.disk.write(disk, rows)
            loc.update(zip(clients, (~disk).tolist(), strict=True))
            u.free.extend(freed)
            u.n -= len(freed)

    def _reserve(self, t: Table, r: int) -> None:
        """Make ``t`` have ``r`` free RAM slots without passing the budget."""
        need = t.n + r
        if need <= t.cap:
            return
        headroom = self.budget - self.memory_bytes_used()
        if t.cap + headroom // t.row_bytes < need:  # take back other tables' spare capacity
            for u in self.tables:
                if u is not t and u.cap > u.n:
                    u.shrink(u.n)
            headroom = self.budget - self.memory_bytes_used()
        allowed = t.cap + headroom // t.row_bytes
        assert allowed >= need, "RAM budget accounting is off"
        old = t.cap
        new = min(max(need, 2 * old, MIN_GROW_ROWS), allowed)
        t.realloc(new)
        t.free.extend(range(new - 1, old - 1, -1))  # popped lowest first

    def _disk(self, t: Table) -> SpillFile:
        if t.disk is None:
            if self._spill_path is None:
                self.spill_root.mkdir(parents=True, exist_ok=True)
                path = Path(tempfile.mkdtemp(prefix="clientstore-", dir=self.spill_root))
                self._spill_path = path
                self._cleanup = weakref.finalize(self, shutil.rmtree, path, True)
            t.disk = SpillFile(self._spill_path / f"table-{t.index}.bin", t.shape, t.dtype)
        return t.disk


def _rows_at(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values[idx]``; a view, not a copy, when ``idx`` is a run of consecutive positions."""
    if len(idx) and idx[-1] - idx[0] == len(idx) - 1 and bool((np.diff(idx) == 1).all()):
        return values[idx[0] : idx[-1] + 1]
    return values[idx]
