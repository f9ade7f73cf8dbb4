"""Coordinate-wise trimmed mean (Yin et al., ICML 2018).

References
----------
D. Yin, Y. Chen, K. Ramchandran, P. Bartlett. "Byzantine-Robust Distributed Learning: Towards
Optimal Statistical Rates". ICML 2018.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from defenses.base import DEFENSES, AggregateResult, DefenseContext, UpdateBatch, check_weighting
from defenses.bucketing import BucketableDefense
from defenses.krum import check_count
from defenses.median import coordinate_verdicts, sorted_rows
from defenses.order_stats import (
    column_trimmed_mean,
    column_weighted_trimmed_mean,
    use_column_kernels,
)


@DEFENSES.register
class TrimmedMeanDefense(BucketableDefense):
    """Per coordinate, drop the ``k`` largest and ``k`` smallest values and average the rest.

    Parameters
    ----------
    f : int or None
        Values trimmed on each side (``k = f``). Default 1 when ``beta`` is not given.
    beta : float or None
        Fraction trimmed on each side, ``0 <= beta < 0.5``: ``k = floor(beta * n)``. Give ``f``
        or ``beta``, not both.
    weighting : {"uniform", "samples"}
        The values left are averaged uniformly, as in the paper (default), or by their rows'
        sample counts (ours, for device sizes that span 100x).

    Notes
    -----
    Requires ``n > 2k``. The cut counts values, never weights: ``k`` values go on each side
    whatever their rows' sample counts (tied values ranked by row order). Every row is kept
    (weight ``1/n``, reason ``"coordinate-wise"``); the verdict score is the row's distance to
    the aggregate. Cohort-scale rounds on the CPU cut each column without sorting, weighted or
    not (:mod:`defenses.order_stats`: the same values kept, added in another order, ~1e-16
    apart in float64).
    """

    name = "trimmedmean"

    def __init__(
        self, f: int | None = None, beta: float | None = None, weighting: str = "uniform"
    ) -> None:
        self.weighting = check_weighting(self.name, weighting)
        if f is not None and beta is not None:
            raise ValueError(
                f"defense {self.name!r}: give f or beta, not both (f={f!r}, beta={beta!r})"
            )
        self.beta: float | None = None
        self.f: int | None = None
        if beta is not None:
            if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0 <= beta < 0.5:
                raise ValueError(
                    f"defense {self.name!r}: beta {beta!r} invalid; valid: 0 <= beta < 0.5"
                )
            self.beta = float(beta)
        else:
            self.f = check_count(self.name, "f", 1 if f is None else f, 0)

    def _k(self, n: int) -> int:
        if self.beta is not None:
            return math.floor(self.beta * n)
        assert self.f is not None
        return self.f

    def precondition(self, n: int) -> str | None:
        k = self._k(n)
        if self.beta is not None and k == 0 and n > 0:  # found at stop 57: beta=0.05 of 10
            return (  # rows trimmed nothing: a plain mean under the rule's name
                f"floor(beta*n) >= 1 (n={n}, beta={self.beta}: it trims nothing; give beta >= "
                f"{1 / n:.4g}, or f=0 for a plain mean)"
            )
        if 2 * k < n:
            return None
        if self.beta is not None:
            return f"2*floor(beta*n) < n (n={n}, beta={self.beta}, k={k})"
        return f"n > 2f (n={n}, f={k})"

    def trim(self, n: int) -> int:
        """Values dropped on each side for a batch of ``n`` rows."""
        self.check_rows(n)
        return self._k(n)

    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        n = len(batch)
        k = self.trim(n)
        weighted = self.weighting == "samples" and (batch.num_samples > 0).all()
        if weighted and use_column_kernels(batch.updates):
            delta = column_weighted_trimmed_mean(batch.updates, batch.num_samples, k)
        elif weighted:
            delta = weighted_trimmed_mean(batch.updates, batch.num_samples, k)
        elif use_column_kernels(batch.updates):
            delta = column_trimmed_mean(batch.updates, k)
        else:
            delta = sorted_rows(batch)[k : n - k].mean(dim=0).cpu()
        delta = delta.to(batch.updates.dtype)
        return AggregateResult(delta, coordinate_verdicts(batch, delta))


def weighted_trimmed_mean(x: torch.Tensor, weights: np.ndarray, k: int) -> torch.Tensor:
    """Per coordinate, drop the ``k`` smallest and ``k`` largest values of ``x`` (``[K, P]``)
    and average the rest with their rows' ``weights`` (float64)."""
    v = x.detach().cpu().numpy()
    n = len(v)
    order = np.argsort(v, axis=0, kind="stable")[k : n - k]
    w = np.asarray(weights, dtype=np.float64)[order]
    vals = np.take_along_axis(v, order, axis=0).astype(np.float64)
    return torch.from_numpy((w * vals).sum(axis=0) / w.sum(axis=0))
