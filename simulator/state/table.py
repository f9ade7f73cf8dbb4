"""One table of :class:`simulator.state.store.ClientStore`: its RAM slots, its spill file and
where each client's row is.

A table keeps its RAM rows in the slots of one array that grows geometrically (the tiers clip
it at the budget, :mod:`simulator.state.tier`), with a stack of its free slots and a dict
client -> slot code.  Rows never move inside RAM while they stay there, except when the array
shrinks (:meth:`Table.shrink` moves the rows above the new end into free slots below it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.state.spill import SpillFile

ABSENT = int(np.iinfo(np.int64).min)  # slot code of a client without a row


@dataclass(eq=False)
class Table:
    """One table: ``n`` RAM rows in the slots of ``ram`` not listed in ``free``, the rest in
    ``disk``.

    ``loc`` maps a client to its slot code: ``s >= 0`` is RAM slot ``s``, ``~s`` (< 0) is
    disk slot ``s``.  ``owner[s]`` is the client in RAM slot ``s`` (garbage for free slots).
    ``free`` is a stack: the slot popped next is the last one.
    """

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    row_bytes: int
    loc: dict[int, int] = field(default_factory=dict)
    ram: np.ndarray = field(init=False)
    owner: np.ndarray = field(init=False)
    free: list[int] = field(init=False)
    n: int = 0
    disk: SpillFile | None = None

    def __post_init__(self) -> None:
        self.clear_ram()

    def clear_ram(self) -> None:
        """Drop the RAM rows and their array (``loc`` is the caller's business)."""
        self.ram = np.empty((0, *self.shape), self.dtype)
        self.owner = np.empty(0, np.int64)
        self.free = []
        self.n = 0

    @property
    def cap(self) -> int:
        """RAM slots allocated (used and free)."""
        return len(self.ram)

    def decl(self) -> dict[str, Any]:
        """The table's declaration as a checkpoint manifest lists it."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype.str}

    def shrink(self, cap: int) -> None:
        """Cut the RAM arrays to ``cap >= n`` slots, first moving the rows in slots at or above
        ``cap`` into free slots below it."""
        if cap >= self.cap:
            return
        live = np.ones(self.cap, bool)
        live[np.array(self.free, np.int64)] = False
        movers = cap + np.flatnonzero(live[cap:])
        holes = np.flatnonzero(~live[:cap])
        into, rest = holes[: len(movers)], holes[len(movers) :]
        if len(movers):
            self.ram[into] = self.ram[movers]
            self.owner[into] = self.owner[movers]
            self.loc.update(zip(self.owner[into].tolist(), into.tolist(), strict=True))
        self.free = rest[::-1].tolist()
        self.realloc(cap)

    def realloc(self, cap: int) -> None:
        """Reallocate the RAM arrays to ``cap`` slots, keeping the first ones."""
        try:  # in place: realloc, no copy for large blocks
            self.ram.resize((cap, *self.shape), refcheck=True)
            self.owner.resize(cap, refcheck=True)
        except ValueError:  # something holds a view: copy instead
            keep = min(cap, len(self.owner))  # owner is resized second
            ram, owner = np.empty((cap, *self.shape), self.dtype), np.empty(cap, np.int64)
            ram[:keep], owner[:keep] = self.ram[:keep], self.owner[:keep]
            self.ram, self.owner = ram, owner
