"""Coordinate-wise median (Yin et al., ICML 2018).

References
----------
D. Yin, Y. Chen, K. Ramchandran, P. Bartlett. "Byzantine-Robust Distributed Learning: Towards
Optimal Statistical Rates". ICML 2018.
"""

from __future__ import annotations

import numpy as np
import torch

from defenses.base import AggregateResult, Defense, DefenseContext, UpdateBatch, Verdict
from defenses.distances import compute_device


def coordinate_verdicts(batch: UpdateBatch, delta: torch.Tensor) -> tuple[Verdict, ...]:
    """Verdicts of a coordinate-wise rule: no row is rejected as a whole, so every row is kept
    with weight ``1/n`` and note ``"coordinate-wise"``; the score is the row's L2 distance to the
    aggregate. (The weights are nominal: the aggregate is not a weighted mean of the rows.)"""
    n = len(batch)
    dist = (batch.updates.double() - delta.double()).norm(dim=1).tolist()
    return tuple(Verdict(int(c), True, 1.0 / n, float(s), "coordinate-wise")
                 for c, s in zip(batch.client_ids, dist, strict=True))


def sort_columns(x: torch.Tensor) -> torch.Tensor:
    """``[K, P]`` float64: each column of ``x`` in increasing order.

    On a GPU (:func:`~defenses.distances.compute_device`) torch sorts there and the result
    stays there; on the CPU numpy sorts the float32 values (several times faster than torch's
    sort along dim 0) and the result is converted: the same values as sorting in float64."""
    dev = compute_device()
    if dev.type == "cuda":
        return torch.sort(x.to(dev, torch.float64), dim=0).values
    return torch.from_numpy(np.sort(x.detach().cpu().numpy(), axis=0)).double()


def sorted_rows(batch: UpdateBatch) -> torch.Tensor:
    """Each coordinate's values in increasing order (``[K, P]`` float64, on
    :func:`~defenses.distances.compute_device`); row order is gone."""
    return sort_columns(batch.updates)


def median_of_sorted(s: torch.Tensor) -> torch.Tensor:
    """Per-coordinate median of column-sorted values; an even count averages the middle two."""
    n = s.shape[0]
    return (s[(n - 1) // 2] + s[n // 2]) / 2


class MedianDefense(Defense):
    """Coordinate-wise median of the updates (unweighted; sample counts are ignored).

    Every row is kept (``kept=True``, weight ``1/n``, reason ``"coordinate-wise"``) because the
    rule discards values coordinate by coordinate, not clients; the verdict score is the row's
    distance to the median. Requires ``n >= 1``; an even ``n`` averages the two middle values.
    """

    name = "median"

    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        if len(batch) < 1:
            raise ValueError(f"defense {self.name!r}: needs n >= 1 (n={len(batch)})")
        delta = median_of_sorted(sorted_rows(batch)).cpu().to(batch.updates.dtype)
        return AggregateResult(delta, coordinate_verdicts(batch, delta))
