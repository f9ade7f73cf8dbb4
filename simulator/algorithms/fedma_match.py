"""Matching the neurons of one layer across clients (FedMA's BBP-MAP step, after PFNM).

Each client ``j`` brings the vectors of its active neurons, ``[A_j, D]`` (a neuron's incoming
weights, its inputs already in the global order, and its bias). The global layer is a list of
neurons, each with the sum of the client vectors matched to it and their count ``m_i``. A client
is matched against the global neurons held by the others with the Hungarian algorithm
(``scipy.optimize.linear_sum_assignment``) on ``A_j x (L + new)`` costs, ``new`` columns being
neurons it may open (the global layer grows, up to ``cap``). Costs (:class:`Cost`):

* ``pfnm`` (Yurochkin et al., ICML 2019; the score of FedMA's reference code, maximised), with
  ``G_i = sum_i / sigma^2`` (the prior mean mu0 = 0) and ``S_i = 1/sigma0^2 + m_i/sigma^2``:
  existing neuron
  ``|w/sigma^2 + G_i|^2 / (1/sigma^2 + S_i) - |G_i|^2 / S_i + log(m_i / (J - m_i))``;
  the k-th new neuron ``|w/sigma^2|^2 / (1/sigma^2 + 1/sigma0^2) - 2 log k + 2 log(gamma0 / J)``.
  (The code writes ``log`` where the paper has ``2 log`` on the popularity term; the code's
  cap of ``m_i`` at 10 is not applied.)
* ``l2``: existing neuron ``|w - sum_i / m_i|^2`` (the distance to the neuron's running mean);
  a new neuron costs ``epsilon`` (the seed's ``epsilon + f(i)`` with ``f = 0``); ``epsilon = 0``
  opens none beyond those a client must open when the others hold fewer neurons than it has.

The order (PFNM's ``match_layer``): the client with the most neurons seeds the global layer, the
others are matched in turn (ties by position), then ``iters`` passes remove each client's
neurons and match it again. The code visits the clients in a random order each pass; here pass
``t`` visits them in order from position ``t mod J`` (no server randomness: a replay of the
recorded rows derives the same layer). The global neurons are then numbered by their first
holder (:func:`canonical`). The global neuron is the mean of the vectors matched to
it (the seed's ``W_n = (1/J) sum_j W_jn Pi_j^T`` where every client holds every neuron; the code
takes the posterior mean, which shrinks it toward mu0 = 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

#: the matching costs
COSTS = ("pfnm", "l2")


@dataclass(frozen=True)
class Cost:
    """The matching cost and its parameters (see the module docstring)."""

    kind: str = "pfnm"
    sigma: float = 1.0
    sigma0: float = 1.0
    gamma0: float = 1.0
    epsilon: float = 0.0

    def new_columns(self, a: int, held: int, cap: int) -> int:
        """How many new neurons a client of ``a`` neurons may open against ``held`` global
        ones under the width ``cap``: every one it needs, at least."""
        need = max(0, a - held)
        if self.kind == "l2" and self.epsilon == 0:
            return need
        return max(need, min(a, cap - held))

    def matrix(self, w: np.ndarray, sums: np.ndarray, counts: np.ndarray, j: int, new: int):
        """``[A, L + new]`` costs (to minimise) of client vectors ``w`` ``[A, D]`` against the
        global neurons (``sums`` ``[L, D]``, ``counts`` ``[L]``, held by the others of ``j``
        clients) and ``new`` new neurons."""
        if self.kind == "l2":
            mean = sums / counts[:, None] if len(counts) else sums
            return np.hstack([sq_dist(w, mean), np.full((len(w), new), self.epsilon)])
        s2, s02 = self.sigma**2, self.sigma0**2
        g = sums / s2
        prec = 1.0 / s02 + counts / s2
        ws = w / s2
        fit = sq_sum(ws, g) / (1.0 / s2 + prec)[None, :]
        score = fit - ((g**2).sum(-1) / prec)[None, :] + np.log(counts / (j - counts))[None, :]
        fresh = (ws**2).sum(-1) / (1.0 / s2 + 1.0 / s02)
        k = np.arange(1, new + 1, dtype=np.float64)
        opened = fresh[:, None] - 2.0 * np.log(k)[None, :] + 2.0 * math.log(self.gamma0 / j)
        return -np.hstack([score, opened])


def sq_dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[A, L]`` squared distances of the rows of ``a`` ``[A, D]`` and ``b`` ``[L, D]``."""
    return ((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T).clip(min=0.0)


def sq_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[A, L]``: ``|a_l + b_i|^2`` for the rows of ``a`` ``[A, D]`` and ``b`` ``[L, D]``."""
    return (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] + 2.0 * a @ b.T


def match_layer(
    ws: list[np.ndarray], cost: Cost, cap: int, iters: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """Match the neurons of ``J`` clients (``ws[j]``: ``[A_j, D]`` float64, ``A_j <= cap``).

    Returns
    -------
    ``(assign, layer)``: ``assign[j][l]`` the global neuron of client ``j``'s neuron ``l``
    (each client's neurons go to distinct global ones), and ``layer`` ``[L, D]``, each global
    neuron the mean of the client vectors matched to it (``L <= cap``).
    """
    n = len(ws)
    if any(len(w) > cap for w in ws):
        raise ValueError(f"fedma: a client holds more than {cap} neurons in a layer")
    dim = ws[0].shape[1] if n else 0
    sums, counts = np.zeros((0, dim)), np.zeros(0)
    assign: list[np.ndarray] = [np.zeros(0, np.int64)] * n
    if not n:
        return assign, sums
    order = sorted(range(n), key=lambda j: -len(ws[j]))
    first = order[0]
    sums, counts = ws[first].copy(), np.ones(len(ws[first]))
    assign[first] = np.arange(len(ws[first]))
    for j in order[1:]:
        sums, counts, assign[j] = add(ws[j], sums, counts, cost, cap, n)
    for t in range(iters if n > 1 else 0):
        for j in [(t + i) % n for i in range(n)]:
            sums, counts = remove(ws[j], assign, j, sums, counts)
            sums, counts, assign[j] = add(ws[j], sums, counts, cost, cap, n)
    return canonical(assign, order, sums / counts[:, None])


def canonical(
    assign: list[np.ndarray], order: list[int], layer: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray]:
    """The global neurons renumbered by their first holder: the first client of ``order``
    holding one, then its neuron index (the first client's neurons take slots ``0..A-1``)."""
    first = np.full(len(layer), np.iinfo(np.int64).max)
    for rank, j in enumerate(order):
        key = rank * (len(layer) + 1) + np.arange(len(assign[j]))
        np.minimum.at(first, assign[j], key)
    new = np.empty(len(layer), np.int64)
    new[np.argsort(first, kind="stable")] = np.arange(len(layer))
    return [new[a] for a in assign], layer[np.argsort(first, kind="stable")]


def add(
    w: np.ndarray, sums: np.ndarray, counts: np.ndarray, cost: Cost, cap: int, j: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Match one client's vectors ``w`` into the global neurons; returns the new sums, counts
    and the client's assignment (new neurons appended in the order of their columns)."""
    held = len(counts)
    if not len(w):
        return sums, counts, np.zeros(0, np.int64)
    new = cost.new_columns(len(w), held, cap)
    rows, cols = linear_sum_assignment(cost.matrix(w, sums, counts, j, new))
    out = np.empty(len(w), np.int64)
    opened = np.sort(cols[cols >= held])
    slot = {int(c): held + i for i, c in enumerate(opened.tolist())}
    out[rows] = [int(c) if c < held else slot[int(c)] for c in cols.tolist()]
    sums = np.vstack([sums, np.zeros((len(opened), sums.shape[1]))])
    counts = np.concatenate([counts, np.zeros(len(opened))])
    sums[out] += w  # a client's neurons go to distinct global ones: no repeated index
    counts[out] += 1.0
    return sums, counts, out


def remove(
    w: np.ndarray, assign: list[np.ndarray], j: int, sums: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Take client ``j``'s vectors out of the global neurons; a neuron left empty is deleted
    and the others' assignments renumbered (``assign`` is changed in place)."""
    sums, counts = sums.copy(), counts.copy()
    sums[assign[j]] -= w  # distinct indices (see add)
    counts[assign[j]] -= 1.0
    keep = counts > 0
    if keep.all():
        return sums, counts
    renum = np.cumsum(keep) - 1
    for k in range(len(assign)):
        if k != j:
            assign[k] = renum[assign[k]]
    return sums[keep], counts[keep]


def inverse_permutation(active: np.ndarray, assign: np.ndarray, cap: int) -> np.ndarray:
    """``[cap]``: for each global slot, the client slot that lands there: client slot
    ``active[l]`` at global slot ``assign[l]``; the client's other slots fill the global slots
    nobody of its took, in increasing order (a permutation of ``0..cap-1``)."""
    inv = np.full(cap, -1, np.int64)
    inv[assign] = active
    rest = np.setdiff1d(np.arange(cap), active)
    inv[inv < 0] = rest
    return inv


def label_weights(counts: np.ndarray) -> np.ndarray:
    """``[J, C]`` p_jk: client ``j``'s share of the samples of class ``k`` (``counts`` ``[J, C]``);
    a class no client holds weighs every client ``1/J``."""
    tot = counts.sum(0, keepdims=True)
    return np.where(tot > 0, counts / np.where(tot > 0, tot, 1.0), 1.0 / len(counts))
