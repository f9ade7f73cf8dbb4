"""Online intervals of traced devices in CSR form, their validation, and their construction.

:class:`IntervalTrace` is what an availability trace file holds once read (see
:mod:`simulator.population.availability` for the format,
:mod:`simulator.population.availability_trace` for the
reader); :func:`first_problem` is the one set of rules both the reader and
:meth:`IntervalTrace.from_rows` apply, vectorized.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class IntervalTrace:
    """Online intervals ``[start, end)`` of ``T`` traced devices, in CSR form.

    ``device_ids`` (T,) are the traced ids in increasing order; the intervals of the k-th one
    are ``starts[offsets[k]:offsets[k + 1]]`` and ``ends[...]``, sorted, disjoint and not
    touching (touching ones are merged), all within ``[0, period_s]``.
    """

    device_ids: np.ndarray
    offsets: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    period_s: float

    def __len__(self) -> int:
        return int(self.device_ids.shape[0])

    @classmethod
    def from_rows(
        cls, device_id: np.ndarray, start: np.ndarray, end: np.ndarray, period_s: float = 0.0
    ) -> IntervalTrace:
        """Build from one row per interval (``period_s`` 0 = the largest end).

        Raises ValueError naming the first bad row (same checks as the file loader)."""
        dev = np.asarray(device_id, dtype=np.int64)
        st, en = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
        if not dev.ndim == st.ndim == en.ndim == 1 or not len(dev) == len(st) == len(en):
            raise ValueError("device_id, start and end must be 1-D and of the same length")
        period = period_of(period_s, en)
        bad = np.flatnonzero(~(np.isfinite(st) & np.isfinite(en)))
        if len(bad):
            raise ValueError(f"row {bad[0]}: start and end must be finite numbers")
        found = first_problem(dev, st, en, period, lambda r: f"row {r}")
        if found:
            raise ValueError(f"row {found[0]}: {found[1]}")
        return build(dev, st, en, period)


def period_of(period_s: float, ends: np.ndarray) -> float:
    """The trace's period: ``period_s`` if > 0, else the largest end (ValueError if none)."""
    if not (math.isfinite(period_s) and period_s >= 0):
        raise ValueError(f"period_s must be a finite number >= 0, got {period_s!r}")
    if not len(ends):
        raise ValueError("empty trace: no online intervals")
    return float(period_s) if period_s > 0 else float(np.max(ends))


def first_problem(
    dev: np.ndarray, start: np.ndarray, end: np.ndarray, period: float, where: Callable[[int], str]
) -> tuple[int, str] | None:
    """The first row (in row order) breaking a rule, with what is wrong; None if all are fine.

    Rules, checked in this order within a row: ``device_id >= 0``, ``start >= 0``,
    ``end > start``, ``end <= period``, and after the device's previous row (in row order)
    without overlapping it.  ``where(row)`` names a row in messages ("line 7")."""
    bad = (dev < 0) | (start < 0) | (end <= start) | (end > period)
    order = np.argsort(dev, kind="stable")
    d, s, e = dev[order], start[order], end[order]
    clash = (d[1:] == d[:-1]) & (s[1:] < e[:-1])
    bad[order[1:][clash]] = True
    if not bad.any():
        return None
    r = int(np.argmax(bad))
    i, a, b = int(dev[r]), float(start[r]), float(end[r])
    if i < 0:
        return r, f"device_id is not an int >= 0: {i}"
    if a < 0:
        return r, f"start_s is negative: {a:g}"
    if b <= a:
        return r, f"end_s {b:g} is not after start_s {a:g}"
    if b > period:
        return r, f"end_s {b:g} is past the period {period:g} s"
    k = int(np.flatnonzero(order == r)[0])
    p = int(order[k - 1])
    what = "starts before" if a < start[p] else "overlaps"
    return r, (
        f"interval [{a:g}, {b:g}) of device {i} {what} its previous interval "
        f"[{start[p]:g}, {end[p]:g}) on {where(p)}; a device's intervals must be in "
        "time order and disjoint"
    )


def build(
    dev: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    period: float,
    traced: np.ndarray | None = None,
) -> IntervalTrace:
    """CSR arrays of valid rows (see :func:`first_problem`); ``traced`` adds device ids that
    have no interval (never online)."""
    order = np.argsort(dev, kind="stable")
    d, s, e = dev[order], start[order], end[order]
    new = np.ones(len(d), dtype=bool)
    new[1:] = (d[1:] != d[:-1]) | (s[1:] != e[:-1])  # touching intervals merge
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(d) - 1)
    d, s, e = d[first], s[first], e[last]
    ids = np.unique(d if traced is None else np.concatenate([d, traced]))
    offsets = np.append(np.searchsorted(d, ids), len(d)).astype(np.int64)
    arrays = [ids, offsets, np.ascontiguousarray(s), np.ascontiguousarray(e)]
    for a in arrays:
        a.flags.writeable = False
    return IntervalTrace(*arrays, float(period))
