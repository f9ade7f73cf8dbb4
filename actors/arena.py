"""Reusable output arrays for the per-round copies of update rows.

A round of 1,000 clients of the digits MLP moves a 36 MB matrix of rows through the driver
(merged from the actors' answers, then put in client order). Allocated afresh every round, each
such matrix costs its page faults: measured 45-75 ms a copy on this machine's VM, against 5-8 ms
for the copy itself into memory already mapped. An :class:`Arena` hands a matrix of the asked
shape back out once nothing outside it refers to it any more (no view, no tensor made with
``torch.from_numpy``, no row held in flight), so a steady run of rounds copies into the same few
mapped buffers and a row someone kept is never overwritten. A simulation clears the arenas
when it closes, so their buffers (at most 2 in each of the two arenas: 144 MB at 1,000
digits-MLP rows, ~1.8 GB at 1,000 CNN rows) do not outlive its run.
"""

from __future__ import annotations

import sys

import numpy as np

#: references to a free buffer inside :meth:`Arena.empty`: the arena's list, the loop
#: variable and ``sys.getrefcount``'s own argument
_FREE_REFS = 3


class Arena:
    """At most ``keep`` buffers, handed out again by shape and dtype when unreferenced.

    Parameters
    ----------
    keep : int
        Buffers kept (the oldest is dropped from the arena, not freed while in use).
    min_bytes : int
        Smaller requests get a fresh array (their page faults cost nothing worth keeping).
    """

    def __init__(self, keep: int = 2, min_bytes: int = 1 << 22) -> None:
        self.keep, self.min_bytes = keep, min_bytes
        self._bufs: list[np.ndarray] = []

    def clear(self) -> None:
        """Let go of every kept buffer (one still in use elsewhere lives on with its user)."""
        self._bufs.clear()

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        """An uninitialized array of ``shape`` and ``dtype`` that nothing else refers to."""
        dtype = np.dtype(dtype)
        if int(np.prod(shape)) * dtype.itemsize < self.min_bytes:
            return np.empty(shape, dtype)
        for buf in self._bufs:
            if buf.shape == shape and buf.dtype == dtype and sys.getrefcount(buf) <= _FREE_REFS:
                return buf
        buf = np.empty(shape, dtype)
        self._bufs.append(buf)
        del self._bufs[: -self.keep]
        return buf
