"""Lenstra-Shmoys-Tardos (LST) lower bound of the makespan on unrelated machines.

For a deadline ``T`` the LST relaxation asks for ``x >= 0`` with ``sum_j x_ij = 1`` for every
task, ``sum_i p_ij x_ij <= T`` for every machine and ``x_ij = 0`` wherever ``p_ij > T``. The
bound is the smallest ``T`` for which it is feasible (J. K. Lenstra, D. B. Shmoys, E. Tardos,
"Approximation algorithms for scheduling unrelated parallel machines", Math. Programming 46,
1990).

How it is found: the allowed set ``S(T) = {(i, j): p_ij <= T}`` only changes at the values of
``p``. On ``[b_k, b_{k+1})`` between two consecutive values it is fixed, and the smallest feasible
deadline there is ``max(b_k, g_k)`` with ``g_k`` = the LP ``min T`` over ``S(b_k)`` (``T`` a
variable), provided ``g_k < b_{k+1}``. ``g_k`` does not increase with ``k`` while ``b_{k+1}``
increases, so the first feasible interval is found by binary search over the breakpoints between
``max(max_i min_j p_ij, plain LP min T)`` (below the first some task has no allowed machine;
the plain LP without the ``p_ij > T`` rule is a relaxation of LST, so no smaller ``T`` can be
feasible) and an optional upper bound (the makespan of any schedule). On Braun's instances the
first interval is already feasible (the bound equals the plain LP), so it costs two LPs; the
search is there for instances where the ``p_ij > T`` rule bites (one long task). The result is
exact for LST up to HiGHS's tolerances. Each LP is solved by column generation (see
``_lp_min_t``) with HiGHS (``scipy.optimize.linprog(method="highs")``) on sparse constraint
matrices: 10,000 x 64 takes a few seconds where the full LP takes about 13 s per solve.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from simulator.scheduler.baselines import check_etc


def _solve(
    etc: np.ndarray, rows: np.ndarray, cols: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """LP ``min T`` over the variables ``x[rows, cols]``: (T, task duals, machine duals)."""
    n, m = etc.shape
    k = rows.size
    var = np.arange(k)
    # variables: x_0 .. x_{k-1}, then T
    a_eq = sp.csr_matrix((np.ones(k), (rows, var)), shape=(n, k + 1))
    a_ub = sp.csr_matrix(
        (
            np.concatenate([etc[rows, cols], -np.ones(m)]),
            (np.concatenate([cols, np.arange(m)]), np.concatenate([var, np.full(m, k)])),
        ),
        shape=(m, k + 1),
    )
    c = np.zeros(k + 1)
    c[k] = 1.0
    res = linprog(
        c, A_ub=a_ub, b_ub=np.zeros(m), A_eq=a_eq, b_eq=np.ones(n), bounds=(0, None), method="highs"
    )
    if res.status != 0:
        raise RuntimeError(f"lp_bound: HiGHS failed ({res.message})")
    return float(res.x[k]), res.eqlin.marginals, res.ineqlin.marginals


def _lp_min_t(etc: np.ndarray, allowed: np.ndarray, start: int = 4) -> float:
    """LP ``min T`` with the assignment variables restricted to ``allowed`` (a bool mask).

    Column generation: start from each task's ``start`` fastest allowed machines, then add the
    columns whose reduced cost ``-u_i - p_ij y_j`` is negative (at most ``start`` per task per
    round) until none is; the result is the optimum over all of ``allowed``.
    """
    n, m = etc.shape
    cost = np.where(allowed, etc, np.inf)
    k0 = min(start, m)
    first = np.argpartition(cost, k0 - 1, axis=1)[:, :k0]
    chosen = np.zeros((n, m), dtype=bool)
    chosen[np.arange(n)[:, None], first] = True
    chosen &= allowed
    while True:
        rows, cols = np.nonzero(chosen)
        t, u, y = _solve(etc, rows, cols)
        reduced = -u[:, None] - etc * y[None, :]
        reduced[~allowed | chosen] = np.inf
        tol = 1e-9 * max(1.0, float(np.abs(u).max()))
        bad = reduced < -tol
        if not bad.any():
            return t
        worst = np.argsort(reduced, axis=1, kind="stable")[:, :k0]
        add = np.zeros((n, m), dtype=bool)
        add[np.arange(n)[:, None], worst] = True
        chosen |= add & bad


def lst_bound(etc: np.ndarray, upper: float | None = None) -> float:
    """The LST lower bound of the makespan of ``etc`` (tasks x machines).

    Parameters
    ----------
    etc : np.ndarray
        Processing times ``p_ij`` (finite, >= 0).
    upper : float, optional
        The makespan of a known schedule; narrows the search (any schedule's makespan is a
        feasible deadline). Default: found from the plain LP.

    Returns
    -------
    float
        The smallest deadline for which the relaxation is feasible.
    """
    etc = check_etc(etc)
    plain = _lp_min_t(etc, np.ones(etc.shape, dtype=bool))
    lower = max(float(etc.min(axis=1).max()), plain)
    top = np.inf if upper is None else float(upper)
    if top < lower * (1.0 - 1e-7):
        raise ValueError(f"lst_bound: upper {upper} is below a lower bound {lower}")
    top = max(top, lower)  # within the LP's tolerance
    cand = np.unique(etc[(etc > lower) & (etc <= top)])
    points = np.concatenate([[lower], cand])  # b_0 .. b_K
    nxt = np.concatenate([points[1:], [np.inf]])

    def value(k: int) -> float | None:
        g = _lp_min_t(etc, etc <= points[k])
        return max(float(points[k]), g) if g < nxt[k] else None

    found = value(0)  # the usual case: the plain LP optimum is already an LST deadline
    if found is not None:
        return found
    lo, hi = 1, points.size - 1
    found = value(hi)
    if found is None:  # cannot happen: the last interval is open-ended (nxt = inf)
        raise RuntimeError("lst_bound: no feasible deadline found")
    while lo < hi:
        mid = (lo + hi) // 2
        v = value(mid)
        if v is None:
            lo = mid + 1
        else:
            hi, found = mid, v
    return found
