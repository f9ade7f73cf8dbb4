"""Bulyan (El Mhamdi, Guerraoui, Rouault, ICML 2018).

References
----------
E. M. El Mhamdi, R. Guerraoui, S. Rouault. "The Hidden Vulnerability of Distributed Learning in
Byzantium". ICML 2018.
"""

from __future__ import annotations

import numpy as np
import torch

from defenses.base import DEFENSES, AggregateResult, DefenseContext, UpdateBatch, Verdict
from defenses.bucketing import BucketableDefense
from defenses.distances import (
    U64,
    GramDistances,
    gamma,
    gram_sq_dists,
    krum_bounds,
    use_exact,
)
from defenses.krum import (
    check_count,
    check_flag,
    exact_scores_of,
    fast_krum_scores,
    krum_scores,
    pairwise_sq_dists,
    rank_rows,
)
from defenses.median import median_of_sorted, sort_columns
from defenses.order_stats import column_window_mean, use_column_kernels


def neighbours_at(r: int, f: int) -> int:
    """Neighbours scored when ``r`` rows remain: ``r - f - 2``, at least 1, at most ``r - 1``."""
    return min(max(r - f - 2, 1), r - 1)


def select_exact(d2: np.ndarray, f: int, theta: int, client_ids: np.ndarray) -> list[int]:
    """The reference selection loop: Krum on the remaining rows, ``theta`` times."""
    remaining = np.arange(len(d2))
    chosen: list[int] = []
    while len(chosen) < theta:
        k = neighbours_at(len(remaining), f)
        sub = d2[np.ix_(remaining, remaining)]
        best = rank_rows(krum_scores(sub, k), client_ids[remaining])[0]
        chosen.append(int(remaining[best]))
        remaining = np.delete(remaining, best)
    return chosen


def select_fast(gd: GramDistances, f: int, theta: int, client_ids: np.ndarray) -> list[int]:
    """The same selection as :func:`select_exact` on the exact matrix, from Gram distances.

    Each row keeps its neighbours sorted by fast distance, a pointer ``p`` past its ``k``
    nearest remaining ones and their running sum; removing the chosen row and lowering ``k``
    moves each pointer by a few places (O(n) per step instead of re-sorting an ``r x r``
    submatrix). Each step's winner is decided with :func:`krum_bounds` (plus the running sums'
    own rounding); when several rows may win, they are re-scored exactly.
    """
    n = len(gd.d2)
    ids = np.asarray(client_ids)
    dist = gd.d2.copy()
    np.fill_diagonal(dist, np.inf)  # self sorts last, never in a prefix
    order = np.argsort(dist, axis=1, kind="stable")
    sd = np.take_along_axis(dist, order, axis=1)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.broadcast_to(np.arange(n), (n, n)), axis=1)
    alive = np.ones(n, dtype=bool)
    k = neighbours_at(n, f)
    p = np.full(n, k)
    s = sd[:, :k].sum(axis=1)
    err = gamma(k) * s  # rounding of the running sums
    chosen: list[int] = []
    while True:
        act = np.flatnonzero(alive)
        best = _winner(gd, act, s, err, sd[act, p[act] - 1], k, ids, alive)
        chosen.append(best)
        alive[best] = False
        if len(chosen) == theta:
            return chosen
        k_new = neighbours_at(len(act) - 1, f)
        act = np.flatnonzero(alive)
        hit = pos[act, best] < p[act]
        s[act[hit]] -= dist[act[hit], best]
        err[act[hit]] += U64 * np.abs(s[act[hit]])
        cnt = np.where(hit, k - 1, k)
        while True:
            back, fwd = cnt > k_new, cnt < k_new
            if not (back.any() or fwd.any()):
                break
            i = act[back]
            p[i] -= 1
            live = alive[order[i, p[i]]]
            s[i[live]] -= sd[i[live], p[i[live]]]
            err[i[live]] += U64 * np.abs(s[i[live]])
            cnt[np.flatnonzero(back)[live]] -= 1
            i = act[fwd]
            live = alive[order[i, p[i]]]
            s[i[live]] += sd[i[live], p[i[live]]]
            err[i[live]] += U64 * np.abs(s[i[live]])
            cnt[np.flatnonzero(fwd)[live]] += 1
            p[i] += 1
        k = k_new


def _winner(
    gd: GramDistances,
    act: np.ndarray,
    s: np.ndarray,
    err: np.ndarray,
    kth: np.ndarray,
    k: int,
    ids: np.ndarray,
    alive: np.ndarray,
) -> int:
    """The row of ``act`` with the lowest exact-path score (ties: client id)."""
    sa = s[act]
    b = krum_bounds(gd, act, sa, kth, k, err[act])
    cand = act[sa - b <= (sa + b).min()]
    # bit-identical rows have equal exact scores: the smallest client id of a group wins
    cand = cand[np.lexsort((ids[cand], gd.group[cand]))]
    cand = cand[np.r_[True, gd.group[cand][1:] != gd.group[cand][:-1]]]
    if len(cand) == 1:
        return int(cand[0])
    exact = exact_scores_of(gd, cand, alive, k)
    return int(cand[rank_rows(exact, ids[cand])[0]])


def closest_to_median(s: torch.Tensor, beta: int) -> torch.Tensor:
    """Per column of the column-sorted ``s``, the mean of the ``beta`` values closest to the
    median (ties: the smaller value first). They form a window ``[lo, lo + beta)`` of the
    sorted column, found by binary search on ``lo`` (the window moves right only when the
    value it would take is strictly closer than the one it would drop)."""
    theta = s.shape[0]
    med = median_of_sorted(s)
    lo = torch.zeros(s.shape[1], dtype=torch.int64, device=s.device)
    hi = torch.full_like(lo, theta - beta)
    while bool((lo < hi).any()):
        mid = ((lo + hi) // 2).clamp_max(theta - beta - 1)  # in range for finished columns
        left = med - s.gather(0, mid[None])[0]
        right = s.gather(0, (mid + beta)[None])[0] - med
        go = (left > right) & (lo < hi)
        lo = torch.where(go, mid + 1, lo)
        hi = torch.where(~go & (lo < hi), mid, hi)
    idx = lo[None] + torch.arange(beta, device=s.device)[:, None]
    return torch.gather(s, 0, idx).mean(dim=0)


@DEFENSES.register
class BulyanDefense(BucketableDefense):
    """Krum selection of ``theta = n - 2f`` rows, then a coordinate-wise trimmed mean.

    Parameters
    ----------
    f : int
        Number of Byzantine clients tolerated (default 1). Requires ``n >= 4f + 3``.
    exact : bool
        Exact distance path and the reference selection loop (default False: Gram distances and
        the incremental loop of :func:`select_fast`, which selects the same rows; batches with
        ``n^2 d <= 2^24`` take the exact path anyway).

    Notes
    -----
    Selection applies Krum repeatedly to the rows not yet selected (``r`` of them), each time
    scoring with the ``r - f - 2`` nearest neighbours, but at least one (the last steps have
    ``r < 2f + 3``). Per coordinate, the aggregate is the mean of the ``beta = theta - 2f``
    selected values closest to the selected values' median (ties: the smaller value first).
    Selected rows are kept with weight ``1/theta`` and reason ``"coordinate-wise"``; the others
    get ``kept=False, reason="bulyan-excluded"``. Scores are the Krum scores over all ``n`` rows.
    Cohort-scale rounds on the CPU find each column's window without sorting
    (:func:`defenses.order_stats.column_window_mean`: the same values, added in another order).
    """

    name = "bulyan"

    def __init__(self, f: int = 1, exact: bool = False) -> None:
        self.f = check_count(self.name, "f", f, 0)
        self.exact = check_flag(self.name, "exact", exact)

    def precondition(self, n: int) -> str | None:
        return f"n >= 4f + 3 (n={n}, f={self.f})" if n < 4 * self.f + 3 else None

    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        n, f = len(batch), self.f
        self.check_rows(n)
        theta, beta = n - 2 * f, n - 4 * f
        if use_exact(n, batch.updates.shape[1], self.exact):
            d2 = pairwise_sq_dists(batch.updates)
            chosen = select_exact(d2, f, theta, batch.client_ids)
            scores = krum_scores(d2, max(n - f - 2, 1))
            s = torch.sort(batch.updates.double()[torch.tensor(chosen)], dim=0).values
            med = median_of_sorted(s)
            closest = torch.argsort((s - med).abs(), dim=0, stable=True)[:beta]
            delta = torch.gather(s, 0, closest).mean(dim=0).to(batch.updates.dtype)
        else:
            gd = gram_sq_dists(batch.updates)
            chosen = select_fast(gd, f, theta, batch.client_ids)
            scores, _ = fast_krum_scores(gd, max(n - f - 2, 1))
            if use_column_kernels(batch.updates):  # no gather, no sort (cohort scale)
                delta = column_window_mean(batch.updates, np.asarray(chosen), beta)
            else:
                delta = closest_to_median(sort_columns(batch.updates[torch.tensor(chosen)]), beta)
            delta = delta.cpu().to(batch.updates.dtype)
        keep = np.zeros(n, dtype=bool)
        keep[chosen] = True
        verdicts = tuple(
            Verdict(int(c), True, 1.0 / theta, float(sc), "coordinate-wise")
            if kp
            else Verdict(int(c), False, 0.0, float(sc), "bulyan-excluded")
            for c, sc, kp in zip(batch.client_ids, scores, keep, strict=True)
        )
        return AggregateResult(delta, verdicts)
