"""Choosing a round's clients among the devices online and idle, at a cost that follows the
cohort rather than the population.

Small populations (below :data:`FULL_PASS_MAX` devices) take one vectorized pass over every
device: the online mask, minus the busy ones, then a seeded choice of ``m`` among them. Large ones
sample: device ids are drawn uniformly with replacement, kept when online and idle and not already
taken, until ``m`` are found. The first ``m`` distinct eligible ids of a uniform stream are a
uniform ``m``-subset of the eligible devices, so both ways draw from the same distribution; only
the large-population one never touches all N devices. When sampling cannot find ``m`` eligible
devices within its budget (few devices online), it falls back to the exact pass.

Who is online comes from an availability model (:mod:`simulator.population.availability`): the
diurnal
model or a trace of online intervals.
"""

from __future__ import annotations

import numpy as np

from simulator.population.availability import Availability, Diurnal
from simulator.population.devices import Population

#: populations up to this size take the exact vectorized pass (under ~2 ms here)
FULL_PASS_MAX = 100_000
#: the sampled path gives up after this many draws per wanted client and takes the exact pass
DRAW_BUDGET = 64


def _model(avail: Availability | Population, seed: int | None, period_s: float) -> Availability:
    if not isinstance(avail, Population):
        return avail
    if seed is None:
        raise ValueError("select_clients: a Population needs seed= (or pass an availability model)")
    return Diurnal(avail, seed, period_s)


def select_clients(
    avail: Availability | Population,
    t: float,
    m: int,
    busy: np.ndarray,
    rng: np.random.Generator,
    *,
    seed: int | None = None,
    period_s: float = 3600.0,
) -> np.ndarray:
    """Sorted ids of ``min(m, eligible)`` devices online at ``t`` and not in ``busy``.

    ``avail`` is the availability model; a :class:`Population` with ``seed`` and ``period_s``
    stands for its :class:`~simulator.population.availability.Diurnal` model (the older call form).
    Returns an empty array when no device is eligible (the caller may move the clock).
    """
    avail = _model(avail, seed, period_s)
    n = len(avail)
    if m <= 0:
        return np.zeros(0, np.int64)
    busy = np.unique(np.asarray(busy, dtype=np.int64))
    if n > FULL_PASS_MAX and m * 20 <= n:
        got = _sample(avail, t, m, busy, rng)
        if got is not None:
            return got
    online = avail.online(t)
    online[busy] = False
    candidates = np.flatnonzero(online)
    k = min(m, len(candidates))
    if k == 0:
        return np.zeros(0, np.int64)
    return np.sort(rng.choice(candidates, k, replace=False))


def _sample(
    avail: Availability, t: float, m: int, busy: np.ndarray, rng: np.random.Generator
) -> np.ndarray | None:
    """Rejection sampling of ``m`` eligible ids; None when the draw budget runs out."""
    taken = np.zeros(0, np.int64)
    draws, batch = 0, 2 * m + 16
    while len(taken) < m:
        if draws > DRAW_BUDGET * m:
            return None
        ids = rng.integers(0, len(avail), size=batch)
        draws += batch
        ok = avail.online_ids(t, ids)
        if len(busy):
            ok &= ~np.isin(ids, busy)
        ids = ids[ok]
        _, first = np.unique(ids, return_index=True)
        ids = ids[np.sort(first)]  # distinct, in draw order
        ids = ids[~np.isin(ids, taken)]
        taken = np.concatenate([taken, ids[: m - len(taken)]])
        batch = max(16, 2 * (m - len(taken)) * max(1, draws // max(len(taken), 1)))
    return np.sort(taken)


def next_online_time(
    avail: Availability | Population, t: float, *, seed: int | None = None, period_s: float = 3600.0
) -> float:
    """The first time after ``t`` at which some device comes online (may be one O(N) pass; only
    used when nobody is online).  ``avail`` as in :func:`select_clients`."""
    return _model(avail, seed, period_s).next_online_time(t)
