"""The spill tier of :class:`simulator.state.store.ClientStore`: rows that do not fit in RAM.

:class:`SpillFile` keeps the rows of one table in a numpy memmap file that grows
geometrically and reuses freed slots; large writes are done by a background thread.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

BACKGROUND_BYTES = 1 << 20  # scattered spill writes from this size on are done in the background
PWRITE_BYTES = 4 << 20  # largest single pwrite of a background spill write
SPILL_BUFFERS = 2  # gather buffers a spill file keeps, free or in flight (see scratch)


class SpillFile:
    """Fixed-shape rows in a memmap file that grows geometrically and reuses freed slots.

    Parameters
    ----------
    path
        The file to create; it must not exist.
    shape, dtype
        Shape and dtype of one row.
    min_bytes
        Smallest growth step of the file, in bytes (at least one row).
    """

    def __init__(
        self, path: Path, shape: tuple[int, ...], dtype: np.dtype, min_bytes: int = 1 << 20
    ) -> None:
        self.path = Path(path)
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.row_bytes = self.dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        self._min_rows = max(1, min_bytes // self.row_bytes)
        self.capacity = 0  # slots in the file
        self._top = 0  # slots at or above this one have never been handed out
        self._free: list[int] = []
        self._rows = np.empty((0, *shape), self.dtype)  # view of the memmap
        self._pool: ThreadPoolExecutor | None = None
        # background writes: (first slot, end slot, the sorted slots or None for all of them,
        # the scratch buffer written or None, future)
        self._pending: list[tuple[int, int, np.ndarray | None, np.ndarray | None, Future]] = []
        self._spare: list[np.ndarray] = []  # scratch buffers free for reuse
        self._lent: np.ndarray | None = None  # the scratch buffer last handed out
        self.path.open("xb").close()

    @property
    def nbytes(self) -> int:
        """Size of the file in bytes."""
        return self.capacity * self.row_bytes

    @property
    def used(self) -> int:
        """Slots that hold a row."""
        return self._top - len(self._free)

    def alloc(self, k: int) -> np.ndarray:
        """``k`` free slots (freed ones first), growing the file when needed."""
        reuse = min(k, len(self._free))
        fresh = k - reuse
        if self._top + fresh > self.capacity:
            self._grow(self._top + fresh)  # first: a full disk leaves the free list as it was
        slots = self._free[len(self._free) - reuse :]
        del self._free[len(self._free) - reuse :]
        out = np.empty(k, np.int64)
        out[:reuse] = slots
        out[reuse:] = np.arange(self._top, self._top + fresh)
        self._top += fresh
        return out

    def release(self, slots: np.ndarray) -> None:
        """Return ``slots`` to the free list; their contents become garbage."""
        self._free.extend(np.asarray(slots, np.int64).tolist())

    def read(self, slots: np.ndarray) -> np.ndarray:
        """The rows in ``slots`` as a new in-memory array (after any write of those slots
        still in flight)."""
        self._wait(slots)
        return self._rows[slots]

    def scratch(self, n: int) -> np.ndarray:
        """An uninitialised ``[n, *shape]`` array to gather rows into and hand to :meth:`write`.

        It reuses the buffer of an earlier write when one is large enough: a fresh array costs
        page faults, several times the copy itself when the machine is busy (and more while a
        background write is filling the page cache).  At most ``SPILL_BUFFERS`` buffers exist,
        free or in flight: past that, this waits for the oldest write in flight, which also
        keeps a disk slower than the rounds from piling up buffers in memory."""
        self._wait(_NO_SLOTS)  # collect finished writes (and their buffers)
        while True:
            self._spare = [b for b in self._spare if len(b) >= n]  # smaller ones: no use now
            if self._spare:
                buf = self._spare.pop(0)  # the smallest that fits
                break
            busy = [e for e in self._pending if e[3] is not None]
            if len(busy) < SPILL_BUFFERS:
                buf = np.empty((n, *self.shape), self.dtype)
                break
            self._finish(busy[0])
        self._lent = buf
        return buf[:n]

    def write(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Store ``values[j]`` in slot ``slots[j]`` (``slots`` unique); takes ownership of
        ``values`` (callers pass freshly gathered rows, or an array from :meth:`scratch`).

        A run of consecutive slots (the usual case: rows spilled for the first time) is one
        ``pwrite`` at its offset, done by a background thread: the disk's write speed, not the
        round, pays for it, and a read of those slots waits for it.  Other slot sets of at
        least ``BACKGROUND_BYTES`` are assigned through the memory map by that thread (the
        page faults are its, not the round's); smaller ones are assigned right away."""
        slots = np.asarray(slots, np.int64)
        n = len(slots)
        buf = self._lent if self._lent is not None and values.base is self._lent else None
        if buf is not None:
            self._lent = None
        self._wait(slots)
        if n > 1 and slots[-1] - slots[0] == n - 1 and bool((np.diff(slots) == 1).all()):
            data = np.ascontiguousarray(values, dtype=self.dtype)
            lo = int(slots[0])
            self._submit(lo, lo + n, None, buf, _pwrite, self.path, data, lo * self.row_bytes)
            return
        if n * self.row_bytes >= BACKGROUND_BYTES:
            members = np.sort(slots)
            # the job keeps this mapping alive: a later _grow remaps, the file stays the same
            self._submit(
                int(members[0]),
                int(members[-1]) + 1,
                members,
                buf,
                _assign,
                self._rows,
                slots,
                values,
            )
            return
        self._rows[slots] = values
        if buf is not None:
            self._keep(buf)

    def _submit(
        self,
        lo: int,
        hi: int,
        members: np.ndarray | None,
        buf: np.ndarray | None,
        fn: Any,
        *args: Any,
    ) -> None:
        """Run ``fn(*args)`` in the background as the write of the slots ``members`` (sorted;
        None: all of ``[lo, hi)``); ``buf`` (a :meth:`scratch` buffer or None) is free again
        once it is done."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spill")
        self._pending.append((lo, hi, members, buf, self._pool.submit(fn, *args)))

    def _wait(self, slots: np.ndarray | None = None) -> None:
        """Finish the background writes that touch ``slots`` (all of them when None)."""
        for entry in list(self._pending):
            lo, hi, members, _, fut = entry
            if slots is None or fut.done() or _touches(slots, lo, hi, members):
                self._finish(entry)

    def _finish(self, entry: tuple[int, int, np.ndarray | None, np.ndarray | None, Future]) -> None:
        """Wait for the pending write ``entry`` and free its buffer."""
        entry[4].result()  # re-raises a failed write here (and at every later wait)
        self._pending = [e for e in self._pending if e is not entry]
        if entry[3] is not None:
            self._keep(entry[3])

    def _keep(self, buf: np.ndarray) -> None:
        """Keep ``buf`` (no longer in use) for :meth:`scratch`, within ``SPILL_BUFFERS``."""
        busy = sum(e[3] is not None for e in self._pending)
        spare = sorted([*self._spare, buf], key=len)  # smallest first: dropped first
        self._spare = spare[max(0, len(spare) + busy - SPILL_BUFFERS) :]

    def close(self) -> None:
        """Finish pending writes, unmap and delete the file."""
        self._wait()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self._rows = np.empty((0, *self.shape), self.dtype)
        self._spare, self._lent = [], None
        self.capacity = 0
        self.path.unlink(missing_ok=True)

    def _grow(self, need: int) -> None:
        """Extend the file to hold ``need`` rows (or twice its rows) and map it again.

        The new blocks are reserved on disk (``posix_fallocate``) before they are mapped: a
        sparse file's blocks are allocated by the page faults of writes through the map, and
        on a full disk such a write kills the process with SIGBUS.  Reserved, a full disk is
        an ``OSError`` (ENOSPC) here, naming the file, and the file and its map stay as they
        were."""
        cap = max(need, 2 * self.capacity, self._min_rows)
        old = self.capacity * self.row_bytes
        try:
            if hasattr(os, "posix_fallocate"):
                with self.path.open("r+b", buffering=0) as fh:
                    os.posix_fallocate(fh.fileno(), old, cap * self.row_bytes - old)
            else:  # macOS has no posix_fallocate: sparse, as before
                os.truncate(self.path, cap * self.row_bytes)
        except OSError as exc:
            os.truncate(self.path, old)  # give back what was reserved
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
        # writes in flight go through the file or through the old mapping, which they hold:
        # they survive the remap
        self._rows = np.empty((0, *self.shape), self.dtype)  # drop the old mapping first
        self._rows = np.asarray(np.memmap(self.path, self.dtype, "r+", shape=(cap, *self.shape)))
        self.capacity = cap


def _pwrite(path: Path, data: np.ndarray, offset: int) -> None:
    # In calls of at most PWRITE_BYTES: a write holds the file's inode lock, which a _grow
    # (fallocate) in the store's thread waits for.  pwrite may also write less than asked.
    view = memoryview(data).cast("B")
    with path.open("r+b", buffering=0) as fh:
        while len(view):
            try:
                done = os.pwrite(fh.fileno(), view[:PWRITE_BYTES], offset)
            except OSError as exc:  # not expected into reserved blocks; name the file if so
                raise OSError(exc.errno, exc.strerror, str(path)) from exc
            view, offset = view[done:], offset + done


_NO_SLOTS = np.empty(0, np.int64)


def _assign(rows: np.ndarray, slots: np.ndarray, values: np.ndarray) -> None:
    rows[slots] = values


def _touches(slots: np.ndarray, lo: int, hi: int, members: np.ndarray | None) -> bool:
    """Whether any of ``slots`` is among ``members`` (sorted; None: all of ``[lo, hi)``)."""
    inside = slots[(slots >= lo) & (slots < hi)]
    if members is None or not len(inside):
        return bool(len(inside))
    at = np.searchsorted(members, inside).clip(max=len(members) - 1)
    return bool((members[at] == inside).any())
