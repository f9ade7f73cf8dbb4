"""Bulyan (El Mhamdi, Guerraoui, Rouault, ICML 2018).

References
----------
E. M. El Mhamdi, R. Guerraoui, S. Rouault. "The Hidden Vulnerability of Distributed Learning in
Byzantium". ICML 2018.
"""

from __future__ import annotations

import numpy as np
import torch

from defenses.base import AggregateResult, Defense, DefenseContext, UpdateBatch, Verdict
from defenses.krum import check_count, krum_scores, pairwise_sq_dists, rank_rows
from defenses.median import median_of_sorted


class BulyanDefense(Defense):
    """Krum selection of ``theta = n - 2f`` rows, then a coordinate-wise trimmed mean.

    Parameters
    ----------
    f : int
        Number of Byzantine clients tolerated (default 1). Requires ``n >= 4f + 3``.

    Notes
    -----
    Selection applies Krum repeatedly to the rows not yet selected (``r`` of them), each time
    scoring with the ``r - f - 2`` nearest neighbours, but at least one (the last steps have
    ``r < 2f + 3``). Per coordinate, the aggregate is the mean of the ``beta = theta - 2f``
    selected values closest to the selected values' median (ties: the smaller value first).
    Selected rows are kept with weight ``1/theta`` and reason ``"coordinate-wise"``; the others
    get ``kept=False, reason="bulyan-excluded"``. Scores are the Krum scores over all ``n`` rows.
    """

    name = "bulyan"

    def __init__(self, f: int = 1) -> None:
        self.f = check_count(self.name, "f", f, 0)

    def precondition(self, n: int) -> str | None:
        return f"n >= 4f + 3 (n={n}, f={self.f})" if n < 4 * self.f + 3 else None

    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        n, f = len(batch), self.f
        self.check_rows(n)
        theta, beta = n - 2 * f, n - 4 * f
        d2 = pairwise_sq_dists(batch.updates)
        remaining = np.arange(n)
        chosen: list[int] = []
        while len(chosen) < theta:
            r = len(remaining)
            k = min(max(r - f - 2, 1), r - 1)
            sub = d2[np.ix_(remaining, remaining)]
            best = rank_rows(krum_scores(sub, k), batch.client_ids[remaining])[0]
            chosen.append(int(remaining[best]))
            remaining = np.delete(remaining, best)
        s = torch.sort(batch.updates.double()[torch.tensor(chosen)], dim=0).values
        med = median_of_sorted(s)
        closest = torch.argsort((s - med).abs(), dim=0, stable=True)[:beta]
        delta = torch.gather(s, 0, closest).mean(dim=0).to(batch.updates.dtype)
        scores = krum_scores(d2, max(n - f - 2, 1))
        keep = np.zeros(n, dtype=bool)
        keep[chosen] = True
        verdicts = tuple(
            Verdict(int(c), True, 1.0 / theta, float(sc), "coordinate-wise") if kp
            else Verdict(int(c), False, 0.0, float(sc), "bulyan-excluded")
            for c, sc, kp in zip(batch.client_ids, scores, keep, strict=True))
        return AggregateResult(delta, verdicts)
