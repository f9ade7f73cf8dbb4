"""Plain FedAvg aggregation (McMahan et al., 2017): the sample-weighted mean of the updates."""

from __future__ import annotations

import numpy as np

from defenses.base import (
    DEFENSES,
    AggregateResult,
    Defense,
    DefenseContext,
    UpdateBatch,
    Verdict,
    check_weighting,
    weighted_mean,
)


@DEFENSES.register
class FedAvgDefense(Defense):
    """Keeps every row; weight_k = n_k / sum n (``weighting='uniform'`` for 1/K)."""

    name = "fedavg"
    linear = True
    uploads = ("*",)  # a weighted mean of any rows (predictions, condensed data too)

    def __init__(self, weighting: str = "samples") -> None:
        self.weighting = check_weighting(self.name, weighting)

    def row_weights(self, num_samples: np.ndarray) -> np.ndarray:
        n = np.asarray(num_samples, dtype=np.float64)
        return n if self.weighting == "samples" else np.ones_like(n)

    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        w = self.row_weights(batch.num_samples)
        w = w / w.sum()
        verdicts = tuple(
            Verdict(int(c), True, float(wi), float("nan"))
            for c, wi in zip(batch.client_ids, w, strict=True)
        )
        return AggregateResult(weighted_mean(batch.updates, w), verdicts)
