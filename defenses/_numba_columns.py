"""The numba kernels of :mod:`defenses.order_stats` (private: the registry's discovery leaves
it out, so numba is imported only by a process that uses them)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

#: columns a block: their keys, transposed, are 64 x n uint32 (256 KB at n = 1,000)
COLUMNS = 64
SIGN = np.uint32(0x80000000)
ALL = np.uint32(0xFFFFFFFF)


@njit(cache=True, inline="always")
def kth_key(keys: np.ndarray, kth: int) -> np.uint32:  # pragma: no cover - compiled
    """The key of rank ``kth`` (0-based) among ``keys``: the largest ``t`` with at most ``kth``
    keys below it, built bit by bit from the top (32 counting passes, no branches in them)."""
    res = np.uint32(0)
    n = keys.shape[0]
    for bit in range(31, -1, -1):
        cand = res | np.uint32(1 << bit)
        c = 0
        for i in range(n):
            c += keys[i] < cand
        if c <= kth:
            res = cand
    return res


@njit(cache=True, inline="always")
def key_value(key: np.uint32) -> float:  # pragma: no cover - compiled
    """The float32 value of an order key (:func:`column_stats`), widened to float64."""
    bits = key ^ SIGN if key & SIGN else ~key
    return np.float64(np.array([bits], dtype=np.uint32).view(np.float32)[0])


@njit(parallel=True, cache=True)
def column_stats(
    x: np.ndarray, trim: int, median: bool, out: np.ndarray
) -> None:  # pragma: no cover
    """Per column of the float32 ``x`` ``[n, d]``: its median (``median``), else the mean of its
    values of rank ``trim`` to ``n - 1 - trim``; float64 into ``out`` ``[d]``.

    Each float32 is mapped to a uint32 key with the same order (sign bit flipped for positive
    values, every bit for negative ones), so an order statistic is a bitwise search on counts.
    The trimmed mean adds the values strictly between the two cut values in row order and the
    cut values times their copies inside the cut, in float64.
    """
    n, d = x.shape
    xb = x.view(np.uint32)
    for b in prange((d + COLUMNS - 1) // COLUMNS):
        lo = b * COLUMNS
        w = min(d, lo + COLUMNS) - lo
        keys = np.empty((w, n), dtype=np.uint32)
        for i in range(n):
            for j in range(w):
                u = xb[i, lo + j]
                keys[j, i] = u ^ (ALL if u & SIGN else SIGN)
        for j in range(w):
            col = keys[j]
            if median:
                m = n // 2
                upper = key_value(kth_key(col, m))
                lower = upper if n % 2 else key_value(kth_key(col, m - 1))
                out[lo + j] = (lower + upper) / 2
                continue
            tlo = kth_key(col, trim)
            thi = kth_key(col, n - 1 - trim)
            vlo, vhi = key_value(tlo), key_value(thi)
            if tlo == thi:
                out[lo + j] = vlo
                continue
            s = 0.0
            lt_lo = le_lo = lt_hi = le_hi = 0
            for i in range(n):
                kk = col[i]
                lt_lo += kk < tlo
                le_lo += kk <= tlo
                lt_hi += kk < thi
                le_hi += kk <= thi
                if tlo < kk < thi:
                    s += np.float64(x[i, lo + j])
            last = n - 1 - trim
            c_lo = min(le_lo - 1, last) - max(lt_lo, trim) + 1
            c_hi = min(le_hi - 1, last) - max(lt_hi, trim) + 1
            out[lo + j] = (s + c_lo * vlo + c_hi * vhi) / (n - 2 * trim)
