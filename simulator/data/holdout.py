"""Carving stratified subsets out of a training set: the server-held public/root set, and the
test split of datasets without one."""

from __future__ import annotations

import numpy as np


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integer counts proportional to ``weights`` that sum exactly to ``total``."""
    w = np.asarray(weights, dtype=np.float64)
    exact = w / w.sum() * total
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    if short > 0:
        counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    return counts


def stratified_split(
    labels: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Take ``round(fraction * N)`` indices with per-class counts proportional to class sizes.

    Returns ``(taken, rest)``, both sorted int64 and disjoint, together covering ``0..N-1``.
    """
    labels = np.asarray(labels)
    classes, inverse = np.unique(labels, return_inverse=True)
    per_class = np.bincount(inverse, minlength=len(classes))
    counts = largest_remainder(per_class, int(round(fraction * len(labels))))
    taken = [rng.permutation(np.flatnonzero(inverse == c))[:k] for c, k in enumerate(counts)]
    taken_idx = np.sort(np.concatenate([np.zeros(0, np.int64), *taken]).astype(np.int64))
    mask = np.ones(len(labels), dtype=bool)
    mask[taken_idx] = False
    return taken_idx, np.flatnonzero(mask).astype(np.int64)


def split_public(
    labels: np.ndarray, fraction: float, *, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Carve a server-held public/root set out of the training set before partitioning.

    Used e.g. by FLTrust's root dataset or distillation-based aggregation.  The split is
    stratified by label and seeded.

    Parameters
    ----------
    labels : ndarray
        Training labels, shape ``[N]``.
    fraction : float
        Fraction in ``[0, 1)`` to reserve; 0 gives an empty public set.
    seed : int
        Seed of the generator.

    Returns
    -------
    (public_idx, remaining_idx) : tuple of ndarray
        Sorted, disjoint int64 index arrays into ``labels`` covering all of it.  Partition the
        rest with ``partition(labels[remaining_idx], ...)`` and map the client indices back
        through ``remaining_idx``.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"public fraction must be in [0, 1), got {fraction}")
    return stratified_split(labels, fraction, np.random.default_rng(seed))
