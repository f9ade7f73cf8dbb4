"""FLTrust (Cao et al., "FLTrust: Byzantine-robust Federated Learning via Trust Bootstrapping",
NDSS 2021).

The server trains its own update g0 on a small clean root set each round (the engine provides it
through ``DefenseContext.server_update``). Each client update g_k gets a trust score
TS_k = ReLU(cos(g_k, g0)), is rescaled to the norm of g0, and the aggregate is
sum_k TS_k * (||g0|| / ||g_k||) g_k / sum_k TS_k. Updates pointing away from the server's
direction get zero trust; rescaling bounds what any single client can contribute.
"""

from __future__ import annotations

import numpy as np
import torch

from defenses.base import (
    DEFENSES,
    AggregateResult,
    Defense,
    DefenseContext,
    UpdateBatch,
    Verdict,
    check_weighting,
)


@DEFENSES.register
class FLTrustDefense(Defense):
    """Trust-bootstrapped aggregation; verdict score = trust score TS_k (0 = rejected).

    Parameters
    ----------
    eps : float
        Guards the norm division for all-zero updates (> 0).
    weighting : str
        ``"uniform"`` (default, the paper's: row k's share is TS_k / sum TS) or ``"samples"``
        (ours: TS_k m_k / sum TS m, with m_k the row's sample count, as FedAvg weighs rows; for
        cohorts whose devices hold 4 to 512 samples, where the uniform shares give the many
        small devices most of the aggregate).
    """

    name = "fltrust"

    def __init__(self, eps: float = 1e-12, weighting: str = "uniform") -> None:
        if not (np.isfinite(eps) and eps > 0):
            raise ValueError(f"defense 'fltrust': eps {eps!r} invalid; valid: finite > 0")
        self.eps = float(eps)
        self.weighting = check_weighting(self.name, weighting)

    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        if ctx.server_update is None:
            raise ValueError("defense 'fltrust': needs a server root set (--public-fraction > 0)")
        g0 = ctx.server_update().to(torch.float64)
        return fltrust(batch, g0, self.eps, self.weighting)


def fltrust(
    batch: UpdateBatch, g0: torch.Tensor, eps: float = 1e-12, weighting: str = "uniform"
) -> AggregateResult:
    """FLTrust's aggregate of ``batch`` given the server update ``g0`` (pure function); with
    ``weighting="samples"`` each trust score is multiplied by the row's sample count."""
    u = batch.updates.to(torch.float64)
    n0 = float(g0.norm())
    norms = u.norm(dim=1)
    cos = (u @ g0) / (norms * n0).clamp_min(eps)
    trust = torch.relu(cos)
    share = trust
    if weighting == "samples":
        share = trust * torch.from_numpy(batch.num_samples.astype(np.float64))
    total = float(share.sum())
    if total <= 0:
        delta = torch.zeros(u.shape[1], dtype=torch.float32)
        weights = torch.zeros_like(trust)
    else:
        weights = share / total
        # the rescaling folded into the coefficients: no [K, P] rescaled copy of the rows
        delta = ((weights * (n0 / norms.clamp_min(eps))) @ u).to(torch.float32)
    verdicts = tuple(
        Verdict(int(c), bool(t > 0), float(w), float(t), "" if t > 0 else "zero-trust")
        for c, t, w in zip(batch.client_ids, trust.tolist(), weights.tolist(), strict=True)
    )
    return AggregateResult(delta, verdicts)
