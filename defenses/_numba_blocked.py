"""The numba kernels of :mod:`defenses.blocked` (a private module: the registry's discovery,
which imports every public module of ``defenses``, leaves it out, so numba is imported only by a
process that runs a blocked pass)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange


@njit(cache=True, inline="always")
def block_mean(x: np.ndarray, w: np.ndarray, lo: int, hi: int) -> np.ndarray:  # pragma: no cover
    """``w @ x[:, lo:hi]`` in float64, rows added four at a time in row order."""
    n = x.shape[0]
    n4 = n - n % 4
    zb = np.zeros(hi - lo)
    for i in range(0, n4, 4):
        w0, w1, w2, w3 = w[i], w[i + 1], w[i + 2], w[i + 3]
        x0, x1, x2, x3 = x[i, lo:hi], x[i + 1, lo:hi], x[i + 2, lo:hi], x[i + 3, lo:hi]
        for j in range(hi - lo):
            zb[j] += (w0 * np.float64(x0[j]) + w1 * np.float64(x1[j])) + (
                w2 * np.float64(x2[j]) + w3 * np.float64(x3[j])
            )
    for i in range(n4, n):
        wi, xi = w[i], x[i, lo:hi]
        for j in range(hi - lo):
            zb[j] += wi * np.float64(xi[j])
    return zb


@njit(cache=True, inline="always")
def row_sums(
    x: np.ndarray, zb: np.ndarray, lo: int, hi: int, square: bool, out: np.ndarray
) -> None:  # pragma: no cover
    """``out[i] = sum_j f(x[i, lo + j], zb[j])`` with ``f = (x - z)^2`` (``square``) or
    ``x z``, in float64: eight interleaved partial sums per row, then the tail."""
    n = x.shape[0]
    length = hi - lo
    l8 = length - length % 8
    acc = np.zeros(8)
    for i in range(n):
        xi = x[i, lo:hi]
        acc[:] = 0.0
        if square:
            for j in range(0, l8, 8):
                for t in range(8):
                    acc[t] += (np.float64(xi[j + t]) - zb[j + t]) ** 2
        else:
            for j in range(0, l8, 8):
                for t in range(8):
                    acc[t] += np.float64(xi[j + t]) * zb[j + t]
        s = 0.0
        for t in range(8):
            s += acc[t]
        for j in range(l8, length):
            v = np.float64(xi[j])
            s += (v - zb[j]) ** 2 if square else v * zb[j]
        out[i] = s


@njit(parallel=True, cache=True)
def blocked_pass(
    x: np.ndarray,
    w: np.ndarray,
    centre: np.ndarray,
    square: bool,
    block: int,
    z: np.ndarray,
    part: np.ndarray,
) -> None:  # pragma: no cover - compiled
    d = x.shape[1]
    for k in prange(part.shape[0]):
        lo = k * block
        hi = min(d, lo + block)
        zb = block_mean(x, w, lo, hi)
        z[lo:hi] = zb
        if not square:
            zb -= centre[lo:hi]
        row_sums(x, zb, lo, hi, square, part[k])


@njit(parallel=True, cache=True)
def blocked_distances(
    x: np.ndarray, z: np.ndarray, block: int, part: np.ndarray
) -> None:  # pragma: no cover - compiled
    """``part[k, i]``: the block-``k`` part of ``||x_i - z||^2``, in float64."""
    d = x.shape[1]
    for k in prange(part.shape[0]):
        lo = k * block
        hi = min(d, lo + block)
        row_sums(x, z[lo:hi], lo, hi, True, part[k])


@njit(parallel=True, cache=True)
def affine_pass(
    x: np.ndarray,
    c: np.ndarray,
    v: np.ndarray,
    alpha: float,
    dists: bool,
    block: int,
    out: np.ndarray,
    part: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """``out = alpha v + c @ x`` and, with ``dists``, ``part[k, i]``: the block-``k`` part of
    ``||x_i - out||^2``, in float64."""
    d = x.shape[1]
    for k in prange(part.shape[0]):
        lo = k * block
        hi = min(d, lo + block)
        zb = block_mean(x, c, lo, hi)
        for j in range(hi - lo):
            zb[j] += alpha * v[lo + j]
        out[lo:hi] = zb
        if dists:
            row_sums(x, zb, lo, hi, True, part[k])
