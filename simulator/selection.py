"""Choosing a round's clients among the devices online and idle, at a cost that follows the
cohort rather than the population.

Small populations (below :data:`FULL_PASS_MAX` devices) take one vectorized pass over every
device: the online mask, minus the busy ones, then a seeded choice of ``m`` among them. Large ones
sample: device ids are drawn uniformly with replacement, kept when online and idle and not already
taken, until ``m`` are found. The first ``m`` distinct eligible ids of a uniform stream are a
uniform ``m``-subset of the eligible devices, so both ways draw from the same distribution; only
the large-population one never touches all N devices. When sampling cannot find ``m`` eligible
devices within its budget (few devices online), it falls back to the exact pass.
"""

from __future__ import annotations

import numpy as np

from simulator.devices import Population

#: populations up to this size take the exact vectorized pass (under ~2 ms here)
FULL_PASS_MAX = 100_000
#: the sampled path gives up after this many draws per wanted client and takes the exact pass
DRAW_BUDGET = 64


def select_clients(pop: Population, t: float, m: int, busy: np.ndarray,
                   rng: np.random.Generator, *, seed: int, period_s: float) -> np.ndarray:
    """Sorted ids of ``min(m, eligible)`` devices online at ``t`` and not in ``busy``.

    Returns an empty array when no device is eligible (the caller may move the clock).
    """
    n = len(pop)
    if m <= 0:
        return np.zeros(0, np.int64)
    busy = np.unique(np.asarray(busy, dtype=np.int64))
    if n > FULL_PASS_MAX and m * 20 <= n:
        got = _sample(pop, t, m, busy, rng, seed=seed, period_s=period_s)
        if got is not None:
            return got
    online = pop.available(t, seed=seed, period_s=period_s)
    online[busy] = False
    candidates = np.flatnonzero(online)
    k = min(m, len(candidates))
    if k == 0:
        return np.zeros(0, np.int64)
    return np.sort(rng.choice(candidates, k, replace=False))


def _sample(pop: Population, t: float, m: int, busy: np.ndarray, rng: np.random.Generator,
            *, seed: int, period_s: float) -> np.ndarray | None:
    """Rejection sampling of ``m`` eligible ids; None when the draw budget runs out."""
    taken = np.zeros(0, np.int64)
    draws, batch = 0, 2 * m + 16
    while len(taken) < m:
        if draws > DRAW_BUDGET * m:
            return None
        ids = rng.integers(0, len(pop), size=batch)
        draws += batch
        ok = pop.available_ids(t, ids, seed=seed, period_s=period_s)
        if len(busy):
            ok &= ~np.isin(ids, busy)
        ids = ids[ok]
        _, first = np.unique(ids, return_index=True)
        ids = ids[np.sort(first)]                       # distinct, in draw order
        ids = ids[~np.isin(ids, taken)]
        taken = np.concatenate([taken, ids[: m - len(taken)]])
        batch = max(16, 2 * (m - len(taken)) * max(1, draws // max(len(taken), 1)))
    return np.sort(taken)


def next_online_time(pop: Population, t: float, *, seed: int, period_s: float) -> float:
    """The first time after ``t`` at which some device comes online (one O(N) pass; only used
    when nobody is online)."""
    wait = np.mod(pop.phases(seed=seed, period_s=period_s) - t, period_s)
    return t + float(wait.min()) + 1e-6
