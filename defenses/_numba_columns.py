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


@njit(cache=True, inline="always")
def cut_sum(
    col: np.ndarray,
    vals: np.ndarray,
    r0: int,
    r1: int,
    tlo: np.uint32,
    thi: np.uint32,
) -> float:  # pragma: no cover - compiled
    """Sum of the values of rank ``r0`` to ``r1`` of a column (keys ``col``, values ``vals``;
    ``tlo`` and ``thi`` the keys of those ranks): the values strictly between the two cut values
    in row order, then each cut value times its copies inside the cut, in float64."""
    vlo, vhi = key_value(tlo), key_value(thi)
    if tlo == thi:
        return (r1 - r0 + 1) * vlo
    s = 0.0
    lt_lo = le_lo = lt_hi = le_hi = 0
    for i in range(col.shape[0]):
        kk = col[i]
        lt_lo += kk < tlo
        le_lo += kk <= tlo
        lt_hi += kk < thi
        le_hi += kk <= thi
        if tlo < kk < thi:
            s += np.float64(vals[i])
    c_lo = min(le_lo - 1, r1) - max(lt_lo, r0) + 1
    c_hi = min(le_hi - 1, r1) - max(lt_hi, r0) + 1
    return s + c_lo * vlo + c_hi * vhi


@njit(cache=True, inline="always")
def extremes(col: np.ndarray, count: int, low: bool) -> np.ndarray:  # pragma: no cover
    """The keys of the ``count`` smallest (``low``) or largest values, in increasing order."""
    n = col.shape[0]
    t = kth_key(col, count - 1 if low else n - count)
    out = np.empty(count, dtype=np.uint32)
    m = 0
    for i in range(n):
        if (col[i] < t) if low else (col[i] > t):
            out[m] = col[i]
            m += 1
    out[m:] = t
    return np.sort(out)


@njit(cache=True, inline="always")
def median_of(col: np.ndarray) -> float:  # pragma: no cover - compiled
    """The column's median; an even count averages the middle two."""
    n = col.shape[0]
    upper = key_value(kth_key(col, n // 2))
    lower = upper if n % 2 else key_value(kth_key(col, n // 2 - 1))
    return (lower + upper) / 2


@njit(cache=True, inline="always")
def weighted_median_of(col: np.ndarray, w: np.ndarray, total: int) -> float:  # pragma: no cover
    """The column's weighted median (integer weights ``w``, ``total`` their sum > 0): the
    smallest value whose cumulative weight reaches half the total, averaged with the next larger
    value where the values up to it weigh exactly half (:func:`defenses.median.weighted_median`).
    The value is the largest key ``t`` with ``2 W(keys < t) < total``, built bit by bit."""
    n = col.shape[0]
    res = np.uint32(0)
    for bit in range(31, -1, -1):
        cand = res | np.uint32(1 << bit)
        c = 0
        for i in range(n):
            if col[i] < cand:
                c += w[i]
        if 2 * c < total:
            res = cand
    upto = 0
    nxt = ALL
    found = False
    for i in range(n):
        if col[i] <= res:
            upto += w[i]
        elif not found or col[i] < nxt:
            nxt = col[i]
            found = True
    lo = key_value(res)
    if 2 * upto == total and found:
        return (lo + key_value(nxt)) / 2
    return lo


@njit(cache=True, inline="always")
def weighted_cut_mean(
    col: np.ndarray, vals: np.ndarray, w: np.ndarray, r0: int, r1: int
) -> float:  # pragma: no cover - compiled
    """The ``w``-weighted mean of the values of rank ``r0`` to ``r1`` of a column, ties ranked
    in row order (a stable sort's ranks), in float64."""
    n = col.shape[0]
    t0, t1 = kth_key(col, r0), kth_key(col, r1)
    lt0 = lt1 = 0
    for i in range(n):
        lt0 += col[i] < t0
        lt1 += col[i] < t1
    s = 0.0
    ws = 0.0
    j0 = j1 = 0
    for i in range(n):
        kk = col[i]
        take = t0 < kk < t1
        if kk == t0:
            take = r0 <= lt0 + j0 <= r1
            j0 += 1
        elif kk == t1:
            take = r0 <= lt1 + j1 <= r1
            j1 += 1
        if take:
            s += np.float64(w[i]) * np.float64(vals[i])
            ws += np.float64(w[i])
    return s / ws


@njit(parallel=True, cache=True)
def column_stats(
    x: np.ndarray,
    rows: np.ndarray,
    mode: int,
    param: int,
    out: np.ndarray,
    weights: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Per column of the float32 rows ``x[rows]``, into ``out`` ``[d]`` (float64):

    * ``mode`` 0: the median;
    * ``mode`` 1: the mean of the values of rank ``param`` to ``n - 1 - param`` (trimmed mean);
    * ``mode`` 2: the mean of the ``param`` values closest to the median (Bulyan's last step):
      the window of ``param`` consecutive sorted values that starts at the first ``lo`` with
      ``med - s[lo] <= s[lo + param] - med`` (ties keep the smaller values), found from the
      ``n - param`` smallest and largest values;
    * ``mode`` 3: the weighted median with the integer row ``weights`` (``[n]``, > 0);
    * ``mode`` 4: the ``weights``-weighted mean of the values of rank ``param`` to ``n - 1 - param``
      (weighted trimmed mean; tied values ranked in row order).

    Each float32 is mapped to a uint32 key with the same order (sign bit flipped for positive
    values, every bit for negative ones), so an order statistic is a bitwise search on counts.
    """
    n = rows.shape[0]
    d = x.shape[1]
    xb = x.view(np.uint32)
    total = 0
    for i in range(n):
        total += weights[i]
    for b in prange((d + COLUMNS - 1) // COLUMNS):
        lo = b * COLUMNS
        w = min(d, lo + COLUMNS) - lo
        keys = np.empty((w, n), dtype=np.uint32)
        vals = np.empty((w, n), dtype=np.float32)
        for i in range(n):
            for j in range(w):
                u = xb[rows[i], lo + j]
                keys[j, i] = u ^ (ALL if u & SIGN else SIGN)
                vals[j, i] = x[rows[i], lo + j]
        for j in range(w):
            col = keys[j]
            if mode == 0:
                out[lo + j] = median_of(col)
            elif mode == 1:
                r0, r1 = param, n - 1 - param
                t0, t1 = kth_key(col, r0), kth_key(col, r1)
                out[lo + j] = cut_sum(col, vals[j], r0, r1, t0, t1) / (r1 - r0 + 1)
            elif mode == 3:
                out[lo + j] = weighted_median_of(col, weights, total)
            elif mode == 4:
                out[lo + j] = weighted_cut_mean(col, vals[j], weights, param, n - 1 - param)
            else:
                spare = n - param
                start = spare
                if spare > 0:
                    med = median_of(col)
                    low = extremes(col, spare, True)  # ranks 0 .. spare - 1
                    high = extremes(col, spare, False)  # ranks param .. n - 1
                    for r in range(spare):
                        if med - key_value(low[r]) <= key_value(high[r]) - med:
                            start = r
                            break
                    t0 = low[start] if start < spare else kth_key(col, spare)
                    t1 = high[start - 1] if start > 0 else kth_key(col, param - 1)
                else:
                    t0, t1 = kth_key(col, 0), kth_key(col, n - 1)
                r0, r1 = start, start + param - 1
                out[lo + j] = cut_sum(col, vals[j], r0, r1, t0, t1) / param
