"""A client source's answer and the seeded arithmetic every source shares.

:class:`ClientRows` is what :meth:`~simulator.data.clients.ClientData.rows` returns;
:func:`hash_normal` gives normal draws that are a pure function of ``(seed, tag, id)`` (the sizes
of virtual clients and generated devices); :func:`holdout_counts` says how many rows a client of
``n`` rows holds out; :func:`check_fraction` and :func:`check_seed` check the arguments of the
sources' splits and generators.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from simulator.rng import mix64

__all__ = ["ClientRows", "check_fraction", "check_seed", "hash_normal", "holdout_counts"]

_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class ClientRows:
    """Local data of some clients.

    ``x``/``y`` are None when ``index`` refers to the pool the source was built on (the
    training set, or the test set for a local-test source); otherwise they hold generated
    samples (float32 ``[M, *input_shape]``, int64 ``[M]``) and ``index`` refers to them.
    ``index`` holds one int64 array of row numbers per requested client, in request order.
    """

    x: np.ndarray | None
    y: np.ndarray | None
    index: list[np.ndarray]


def hash_normal(seed: int, ids: np.ndarray, tag: int) -> np.ndarray:
    """Standard normal draws that are a pure, vectorized function of ``(seed, tag, id)``.

    A splitmix64-style hash of the three integers gives 53 random bits, i.e. a uniform
    ``u = (bits + 0.5) / 2**53`` in the open interval (0, 1), mapped to ``N(0, 1)`` by the
    inverse normal CDF (``scipy.special.ndtri``).  ``|z|`` never exceeds about 8.3.

    Parameters
    ----------
    seed : int
        Experiment seed (any integer; taken modulo 2**64).
    ids : ndarray
        Integer ids, any shape.
    tag : int
        Stream tag, so that different uses of the same (seed, id) are independent.

    Returns
    -------
    ndarray
        float64 array of the shape of ``ids``.
    """
    key = mix64(np.array([int(seed) & _U64], dtype=np.uint64))
    key = mix64(key ^ np.array([int(tag) & _U64], dtype=np.uint64))
    h = mix64(key ^ mix64(np.asarray(ids, dtype=np.int64).view(np.uint64)))
    u = ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    return ndtri(u)


def holdout_counts(n: np.ndarray, fraction: float) -> np.ndarray:
    """Rows held out of clients of ``n`` rows: ``min(max(1, round(fraction * n)), n - 1)``.

    A client with a single row (or none) holds out 0; rounding is half-to-even like Python's
    ``round``.  Vectorized; returns int64 of the shape of ``n``.
    """
    n = np.asarray(n, dtype=np.int64)
    k = np.minimum(np.maximum(1, np.rint(fraction * n).astype(np.int64)), n - 1)
    return np.where(n >= 2, k, 0).astype(np.int64)


def check_fraction(fraction: float) -> None:
    """ValueError unless ``fraction`` (of a split) is in (0, 1)."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"split fraction must be in (0, 1), got {fraction}")


def check_seed(name: str, value: int) -> None:
    """ValueError naming ``name`` unless ``value`` is a non-negative integer."""
    if int(value) != value or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
