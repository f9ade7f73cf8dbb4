"""The RAM and disk tiers behind :class:`simulator.state.ClientStore`, and their LRU order.

Each table keeps its RAM rows densely packed in one array that grows geometrically (clipped at
the budget), plus a dict client -> slot code.  Past the byte budget the least recently used rows
(across tables) move to a memmap spill file per table (:class:`~simulator.state_files.SpillFile`);
a spilled row read again moves back to RAM when it fits.  Every operation works on its ids with
dict lookups and vectorised numpy gathers/scatters; nothing is proportional to the number of
clients stored.
Arguments are validated by the caller (:class:`~simulator.state.ClientStore`).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator.state_files import SpillFile

ABSENT = int(np.iinfo(np.int64).min)  # slot code of a client without a row
MIN_GROW_ROWS = 16  # smallest RAM growth step (clipped to the budget)


@dataclass(eq=False)
class Table:
    """One table: RAM rows packed in ``ram[:n]`` and the rest in ``disk``.

    ``loc`` maps a client to its slot code: ``s >= 0`` is RAM slot ``s``, ``~s`` (< 0) is
    disk slot ``s``.  ``owner[s]`` is the client in RAM slot ``s``.
    """

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    row_bytes: int
    loc: dict[int, int] = field(default_factory=dict)
    ram: np.ndarray = field(init=False)
    owner: np.ndarray = field(init=False)
    n: int = 0
    disk: SpillFile | None = None

    def __post_init__(self) -> None:
        self.ram = np.empty((0, *self.shape), self.dtype)
        self.owner = np.empty(0, np.int64)

    @property
    def cap(self) -> int:
        return len(self.ram)

    def decl(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype.str}


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
        t = Table(len(self.tables), name, shape, dtype,
                  dtype.itemsize * int(np.prod(shape, dtype=np.int64)))
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
                self._evict_for(t, r)
                self._append_ram(t, ids[pos[:r]], values[pos[:r]])
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
        if ram.any():
            t.ram[codes[ram]] = values[ram]
            self._touch(t, ids[ram])
        rest = np.flatnonzero(~ram)
        if not len(rest):
            return
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
            self._evict_for(t, r)
            self._append_ram(t, ids[to_ram], values[to_ram])

    def remove(self, t: Table, clients: list[int]) -> None:
        """Drop the rows of ``clients`` (unique, all present) from ``t``."""
        codes = np.array([t.loc.pop(c) for c in clients], np.int64)
        in_ram = codes >= 0
        if in_ram.any():
            if self.spilling:
                pop = self._lru.pop
                for c in np.asarray(clients)[in_ram].tolist():
                    pop((t.index, c))
            self._remove_ram(t, codes[in_ram])
            if t.cap > MIN_GROW_ROWS and t.n <= t.cap // 4:  # give memory back geometrically
                self._resize(t, max(2 * t.n, MIN_GROW_ROWS))
        if not in_ram.all():
            t.disk.release(~codes[~in_ram])

    def close(self) -> None:
        """Drop all rows and remove the spill files."""
        for t in self.tables:
            if t.disk is not None:
                t.disk.close()
            t.__post_init__()
            t.loc, t.n = {}, 0
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

    def _evict_for(self, t: Table, r: int) -> None:
        """Spill least recently used rows until ``r`` more rows of ``t`` fit, then reserve."""
        deficit = self.data_bytes() + r * t.row_bytes - self.budget
        victims: dict[int, list[int]] = {}
        while deficit > 0:
            (i, c), _ = self._lru.popitem(last=False)
            victims.setdefault(i, []).append(c)
            deficit -= self.tables[i].row_bytes
        for i, clients in victims.items():
            u = self.tables[i]
            slots = np.array([u.loc[c] for c in clients], np.int64)
            disk = self._disk(u).alloc(len(slots))
            u.disk.write(disk, u.ram[slots])
            u.loc.update(zip(clients, (~disk).tolist(), strict=True))
            self._remove_ram(u, slots)
        self._reserve(t, r)

    def _reserve(self, t: Table, r: int) -> None:
        """Grow ``t``'s RAM array to hold ``r`` more rows without passing the budget."""
        need = t.n + r
        if need <= t.cap:
            return
        headroom = self.budget - self.memory_bytes_used()
        if t.cap + headroom // t.row_bytes < need:  # take back other tables' spare capacity
            for u in self.tables:
                if u is not t and u.cap > u.n:
                    self._resize(u, u.n)
            headroom = self.budget - self.memory_bytes_used()
        allowed = t.cap + headroom // t.row_bytes
        assert allowed >= need, "RAM budget accounting is off"
        self._resize(t, min(max(need, 2 * t.cap, MIN_GROW_ROWS), allowed))

    @staticmethod
    def _resize(t: Table, cap: int) -> None:
        """Reallocate ``t``'s RAM arrays to ``cap`` slots, keeping rows ``[0, n)``."""
        try:  # in place: realloc, no copy for large blocks
            t.ram.resize((cap, *t.shape), refcheck=True)
            t.owner.resize(cap, refcheck=True)
        except ValueError:  # something holds a view: copy instead
            ram, owner = np.empty((cap, *t.shape), t.dtype), np.full(cap, -1, np.int64)
            ram[:t.n], owner[:t.n] = t.ram[:t.n], t.owner[:t.n]
            t.ram, t.owner = ram, owner

    def _append_ram(self, t: Table, ids: np.ndarray, values: np.ndarray) -> None:
        """Place new RAM rows at the end of ``t``'s packed array (capacity reserved)."""
        k, n = len(ids), t.n
        t.ram[n:n + k] = values
        t.owner[n:n + k] = ids
        clients = ids.tolist()
        t.loc.update(zip(clients, range(n, n + k), strict=True))
        t.n = n + k
        if self.spilling:
            i = t.index
            self._lru.update(((i, c), None) for c in clients)

    def _remove_ram(self, t: Table, slots: np.ndarray) -> None:
        """Free RAM ``slots`` of ``t`` by moving the last live rows into the holes."""
        new_n = t.n - len(slots)
        t.owner[slots] = -1
        movers = new_n + np.flatnonzero(t.owner[new_n:t.n] >= 0)
        holes = np.sort(slots[slots < new_n])
        if len(movers):
            t.ram[holes] = t.ram[movers]
            t.owner[holes] = t.owner[movers]
            t.loc.update(zip(t.owner[holes].tolist(), holes.tolist(), strict=True))
        t.owner[new_n:t.n] = -1
        t.n = new_n

    def _disk(self, t: Table) -> SpillFile:
        if t.disk is None:
            if self._spill_path is None:
                self.spill_root.mkdir(parents=True, exist_ok=True)
                path = Path(tempfile.mkdtemp(prefix="clientstore-", dir=self.spill_root))
                self._spill_path = path
                self._cleanup = weakref.finalize(self, shutil.rmtree, path, True)
            t.disk = SpillFile(self._spill_path / f"table-{t.index}.bin", t.shape, t.dtype)
        return t.disk
