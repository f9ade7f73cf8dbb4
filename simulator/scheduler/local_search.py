"""Local search on one assignment: move or swap tasks off the critical (most loaded) machine."""

from __future__ import annotations

import time

import numpy as np


def improve(
    etc: np.ndarray,
    assign: np.ndarray,
    max_steps: int = 1000,
    swap_sample: int | None = None,
    rng: np.random.Generator | None = None,
    deadline: float = np.inf,
) -> tuple[np.ndarray, np.ndarray]:
    """Best-improvement descent from ``assign``; returns (new assignment, its machine loads).

    A step looks at the critical machine ``c`` (load ``L_c``) and, over every task ``t`` on it,
    at moving ``t`` to another machine ``k`` and at swapping it with a task ``u`` on ``k``; it
    applies the change with the smallest ``max(new L_c, new L_k)`` if that is below ``L_c``.
    Every applied step lowers the sorted load vector lexicographically, so the descent ends; it
    stops after ``max_steps`` steps or when no step helps.

    Parameters
    ----------
    etc : np.ndarray
        tasks x machines times.
    assign : np.ndarray
        Start assignment (not modified).
    max_steps : int
        Cap on applied steps.
    swap_sample : int, optional
        Consider swaps with at most this many tasks (drawn with ``rng``) off the critical
        machine per step; ``None`` considers all of them.
    rng : np.random.Generator, optional
        Needed when ``swap_sample`` is set.
    deadline : float
        A ``time.perf_counter`` value after which no further step starts.
    """
    n, m = etc.shape
    a = np.array(assign, dtype=np.int64, copy=True)
    load = np.bincount(a, weights=etc[np.arange(n), a], minlength=m)
    if m < 2:
        return a, load
    for _ in range(max_steps):
        if time.perf_counter() > deadline:
            break
        c = int(np.argmax(load))
        top = load[c]
        on_c = np.flatnonzero(a == c)
        if on_c.size == 0:
            break
        keep_c = top - etc[on_c, c]  # load of c once t leaves, per t
        move = np.maximum(load[None, :] + etc[on_c], keep_c[:, None])
        move[:, c] = np.inf
        mi = int(np.argmin(move))
        best, kind = move.flat[mi], 0
        off = np.flatnonzero(a != c)
        if swap_sample is not None and off.size > swap_sample and rng is not None:
            off = np.sort(rng.choice(off, size=swap_sample, replace=False))
        if off.size:
            k = a[off]
            new_c = keep_c[:, None] + etc[off, c][None, :]
            new_k = (load[k] - etc[off, k])[None, :] + etc[np.ix_(on_c, k)]
            swap = np.maximum(new_c, new_k)
            si = int(np.argmin(swap))
            if swap.flat[si] < best:
                best, kind = swap.flat[si], 1
        if not best < top:
            break
        if kind == 0:
            t, k_to = on_c[mi // m], mi % m
            load[c] -= etc[t, c]
            load[k_to] += etc[t, k_to]
            a[t] = k_to
        else:
            t, u = on_c[si // off.size], off[si % off.size]
            k_to = a[u]
            load[c] += etc[u, c] - etc[t, c]
            load[k_to] += etc[t, k_to] - etc[u, k_to]
            a[t], a[u] = k_to, c
    return a, load


def balance(
    etc: np.ndarray, assign: np.ndarray, max_steps: int = 1000, deadline: float = np.inf
) -> tuple[np.ndarray, np.ndarray]:
    """Descent on the sum of squared machine loads without raising the makespan.

    A step finds, for every task, the move to another machine that lowers ``sum_k L_k^2`` most
    while the receiving machine stays strictly below the current makespan, and applies the best
    of them in order of gain as long as no machine takes part in two moves of the step (the gains
    of such moves are independent, so each still holds). This makes room under the makespan
    (less total work, flatter loads) for ``improve`` to use. Stops after ``max_steps`` steps,
    when nothing helps, or at ``deadline`` (a ``time.perf_counter`` value).
    """
    n, m = etc.shape
    a = np.array(assign, dtype=np.int64, copy=True)
    rows = np.arange(n)
    load = np.bincount(a, weights=etc[rows, a], minlength=m)
    for _ in range(max_steps):
        if time.perf_counter() > deadline:
            break
        top = load.max()
        own = load[a]
        src = own - etc[rows, a]
        dst = load[None, :] + etc
        delta = (src**2 - own**2)[:, None] + dst**2 - (load**2)[None, :]
        delta[rows, a] = np.inf
        delta[dst >= top] = np.inf
        to = np.argmin(delta, axis=1)
        gain = delta[rows, to]
        cand = np.flatnonzero(gain < -1e-12 * top * top)
        if cand.size == 0:
            break
        cand = cand[np.argsort(gain[cand], kind="stable")]
        used = np.zeros(m, dtype=bool)
        for t in cand:
            i, k = a[t], to[t]
            if used[i] or used[k]:
                continue
            used[i] = used[k] = True
            load[i] -= etc[t, i]
            load[k] += etc[t, k]
            a[t] = k
            if used.all():
                break
    return a, load
