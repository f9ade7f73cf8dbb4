"""Krum and Multi-Krum (Blanchard et al., NeurIPS 2017).

References
----------
P. Blanchard, E. M. El Mhamdi, R. Guerraoui, J. Stainer. "Machine Learning with Adversaries:
Byzantine Tolerant Gradient Descent". NeurIPS 2017.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from defenses.base import AggregateResult, Defense, DefenseContext, UpdateBatch, Verdict


def check_count(rule: str, param: str, value: Any, low: int) -> int:
    """An integer parameter ``>= low``; anything else raises ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"defense {rule!r}: {param} {value!r} invalid; valid: integer >= {low}")
    return int(value)


def pairwise_sq_dists(x: torch.Tensor) -> np.ndarray:
    """``[K, K]`` squared Euclidean distances in float64.

    Each pair is summed from its coordinate differences (``cdist`` without the Gram-matrix
    shortcut, which cancels badly for close rows and depends on row placement), and the upper
    triangle is mirrored so the matrix is exactly symmetric.
    """
    x = x.double()
    d = torch.cdist(x, x, compute_mode="donot_use_mm_for_euclid_dist").square()
    upper = torch.triu(d, diagonal=1)
    return (upper + upper.T).numpy()


def krum_scores(d2: np.ndarray, neighbours: int) -> np.ndarray:
    """Score_i = sum of the ``neighbours`` smallest squared distances from i to the others."""
    k = d2.shape[0]
    others = np.sort(d2[~np.eye(k, dtype=bool)].reshape(k, k - 1), axis=1)
    return others[:, :neighbours].sum(axis=1)


def rank_rows(scores: np.ndarray, client_ids: np.ndarray) -> np.ndarray:
    """Row indices by increasing score, ties broken by client id (order-independent)."""
    return np.lexsort((np.asarray(client_ids), scores))


class MultiKrumDefense(Defense):
    """Multi-Krum: average the ``m`` rows with the lowest Krum scores.

    Parameters
    ----------
    f : int
        Number of Byzantine clients tolerated (default 1). Requires ``n > 2f + 2``.
    m : int or None
        Rows selected; ``None`` means ``n - f``. Requires ``1 <= m <= n - f``.

    Notes
    -----
    The Krum score of row i is the sum of squared distances to its ``n - f - 2`` nearest other
    rows. Selected rows are averaged uniformly (weight ``1/m``); the others get
    ``kept=False, reason="krum-excluded"``. Every verdict's ``score`` is the Krum score; ties are
    broken by client id so the result does not depend on row order.
    """

    name = "multikrum"

    def __init__(self, f: int = 1, m: int | None = None) -> None:
        self.f = check_count(self.name, "f", f, 0)
        self.m = None if m is None else check_count(self.name, "m", m, 1)

    def selection_size(self, n: int) -> int:
        return n - self.f if self.m is None else self.m

    def precondition(self, n: int) -> str | None:
        if n <= 2 * self.f + 2:
            return f"n > 2f + 2 (n={n}, f={self.f})"
        m = self.selection_size(n)
        if m > n - self.f:
            return f"m <= n - f (n={n}, f={self.f}, m={m})"
        return None

    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        n = len(batch)
        self.check_rows(n)
        m = self.selection_size(n)
        scores = krum_scores(pairwise_sq_dists(batch.updates), n - self.f - 2)
        chosen = rank_rows(scores, batch.client_ids)[:m]   # summed in rank order
        delta = batch.updates[torch.from_numpy(chosen)].double().mean(dim=0)
        keep = np.zeros(n, dtype=bool)
        keep[chosen] = True
        verdicts = tuple(
            Verdict(int(c), True, 1.0 / m, float(s)) if k
            else Verdict(int(c), False, 0.0, float(s), "krum-excluded")
            for c, s, k in zip(batch.client_ids, scores, keep, strict=True))
        return AggregateResult(delta.to(batch.updates.dtype), verdicts)


class KrumDefense(MultiKrumDefense):
    """Krum: the single row with the lowest Krum score (Multi-Krum with ``m = 1``).

    Parameters
    ----------
    f : int
        Number of Byzantine clients tolerated (default 1). Requires ``n > 2f + 2``.
    """

    name = "krum"

    def __init__(self, f: int = 1) -> None:
        super().__init__(f=f, m=1)
