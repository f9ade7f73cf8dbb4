"""Baseline placements of independent tasks on unrelated machines, from an ETC matrix.

Every heuristic takes ``etc`` (tasks x machines, expected time of task i on machine j) and
returns an int64 assignment array ``assign[i] = machine``. Ties go to the lowest task index,
then the lowest machine index, so every result is deterministic. Names: ``BASELINES``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def check_etc(etc: np.ndarray) -> np.ndarray:
    """``etc`` as a float64 2-d array with finite, non-negative entries, or ValueError."""
    a = np.asarray(etc, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"etc: need a non-empty tasks x machines matrix, got shape {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("etc: entries must be finite and >= 0")
    return a


def loads(etc: np.ndarray, assign: np.ndarray) -> np.ndarray:
    """Per-machine total time of ``assign`` (length = machines)."""
    n, m = etc.shape
    assign = np.asarray(assign)
    if assign.shape != (n,) or (n and (assign.min() < 0 or assign.max() >= m)):
        raise ValueError(f"assign: need {n} machine indices in [0, {m}), got shape {assign.shape}")
    return np.bincount(assign, weights=etc[np.arange(n), assign], minlength=m)


def makespan(etc: np.ndarray, assign: np.ndarray) -> float:
    """Largest machine load of ``assign`` on ``etc``."""
    return float(loads(etc, assign).max())


def round_robin(etc: np.ndarray) -> np.ndarray:
    """Task ``i`` on machine ``i mod machines``."""
    n, m = check_etc(etc).shape
    return np.arange(n, dtype=np.int64) % m


def lpt(etc: np.ndarray) -> np.ndarray:
    """Longest task first (length = its smallest ETC) on the machine where it finishes first."""
    etc = check_etc(etc)
    n, m = etc.shape
    order = np.lexsort((np.arange(n), -etc.min(axis=1)))
    ready = np.zeros(m)
    assign = np.empty(n, dtype=np.int64)
    for i in order:
        j = int(np.argmin(ready + etc[i]))
        assign[i] = j
        ready[j] += etc[i, j]
    return assign


def minmin(etc: np.ndarray) -> np.ndarray:
    """Min-Min: repeatedly place the task with the earliest possible completion time there.

    Only the chosen machine's ready time changes after a step, so only the tasks whose best
    machine it was are re-evaluated.
    """
    etc = check_etc(etc)
    n, m = etc.shape
    ready = np.zeros(m)
    best_m = np.argmin(etc, axis=1)
    best_ct = etc[np.arange(n), best_m]
    assign = np.full(n, -1, dtype=np.int64)
    for _ in range(n):
        i = int(np.argmin(best_ct))
        j = int(best_m[i])
        assign[i] = j
        ready[j] += etc[i, j]
        best_ct[i] = np.inf
        stale = np.flatnonzero((best_m == j) & (assign < 0))
        if stale.size:
            ct = ready + etc[stale]
            best_m[stale] = np.argmin(ct, axis=1)
            best_ct[stale] = ct[np.arange(stale.size), best_m[stale]]
    return assign


def sufferage(etc: np.ndarray) -> np.ndarray:
    """Sufferage (Maheswaran et al. 1999), in passes.

    In a pass every unplaced task wants its earliest-completion machine; its sufferage is the
    second-earliest minus the earliest completion time. Each wanted machine takes the wanting task
    with the largest sufferage (ties: lowest index); the others wait for the next pass. Ready
    times are updated once per pass. With one machine the sufferage is 0 for every task.
    """
    etc = check_etc(etc)
    n, m = etc.shape
    ready = np.zeros(m)
    assign = np.full(n, -1, dtype=np.int64)
    left = np.arange(n)
    while left.size:
        ct = ready + etc[left]
        if m > 1:
            two = np.partition(ct, 1, axis=1)[:, :2]
            suff = two[:, 1] - two[:, 0]
        else:
            suff = np.zeros(left.size)
        want = np.argmin(ct, axis=1)
        # per machine, the first task (in index order) with the largest sufferage
        order = np.lexsort((left, -suff, want))
        first = np.ones(order.size, dtype=bool)
        first[1:] = want[order][1:] != want[order][:-1]
        win = order[first]
        assign[left[win]] = want[win]
        ready += np.bincount(want[win], weights=ct[win, want[win]] - ready[want[win]], minlength=m)
        keep = np.ones(left.size, dtype=bool)
        keep[win] = False
        left = left[keep]
    return assign


BASELINES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "round_robin": round_robin,
    "lpt": lpt,
    "minmin": minmin,
    "sufferage": sufferage,
}


def baseline(name: str, etc: np.ndarray) -> np.ndarray:
    """The assignment of the baseline called ``name``; ValueError lists the valid names."""
    if name not in BASELINES:
        raise ValueError(f"baseline: unknown {name!r}; valid: {sorted(BASELINES)}")
    return BASELINES[name](etc)
