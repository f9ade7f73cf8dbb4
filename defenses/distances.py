"""Pairwise squared distances for the distance-based rules (Krum, Multi-Krum, Bulyan).

Two paths:

* :func:`exact_sq_dists` sums every pair from its coordinate differences in float64 (``cdist``
  without the Gram-matrix shortcut); O(n^2 d) with no matrix multiply. It is the reference.
* :func:`gram_sq_dists` uses one float64 matrix multiply on rows centered at a robust center
  ``mu``: ``d2_ij = ||y_i||^2 + ||y_j||^2 - 2 y_i.y_j`` with ``y = x - mu``; the result is
  symmetric, has an exactly zero diagonal and is clamped at 0. Rows that are bit-for-bit equal
  get exactly the same distances (and 0 between them).

Error bound of the Gram path. With unit roundoff ``u = 2^-53`` and ``gamma_k = k u / (1 - k u)``,
a dot product of length ``d`` summed in any order satisfies
``|fl(a.b) - a.b| <= gamma_d ||a|| ||b||``. Centering rounds each coordinate once
(``|y_i - (x_i - mu)| <= u |y_i|``), and forming ``nu_i + nu_j - 2 G_ij`` adds two roundings.
Adding up, for the true squared distance ``D_ij = ||x_i - x_j||^2`` of the float32 rows,

    |d2_ij - D_ij| <= c (r_i + r_j)^2,   c = 1.01 gamma_{d + 8},

where ``r_i >= ||y_i||`` is :attr:`GramDistances.radius` (the computed ``sqrt(nu_i)`` inflated by
its own rounding). Roughly ``2 c (||y_i||^2 + ||y_j||^2)``: about ``d * 2.2e-16`` times the
squared norms of the centered rows, far below the spread of Krum scores in practice. The exact
path's own values satisfy ``|D^ - D| <= gamma_{d + 6} D`` (no cancellation). The Krum code
(:mod:`defenses.krum`) turns this into a bound per score and re-scores with the exact path every
row whose place in the selection the bound leaves open, so the selection is the exact path's.

At cohort scale Krum and Multi-Krum use a float32 product instead, with a looser bound and a
float64 tier in between (:mod:`defenses.screen`); Bulyan keeps this one.

The heavy matrix work runs on :func:`compute_device` (CUDA when the process has a GPU, else the
CPU with torch's threads); results come back to the CPU as numpy arrays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

#: unit roundoff of float64
U64 = 2.0**-53
EXACT_MODE = "donot_use_mm_for_euclid_dist"


def gamma(k: int) -> float:
    """``k u / (1 - k u)``: the classic bound on the relative error of a k-term float64 sum."""
    ku = k * U64
    return ku / (1.0 - ku)


#: below this many coordinate operations (``n^2 d``) the exact path is used anyway: it costs
#: under a few ms there, and small hand-checked cases then keep their exact values
EXACT_WORK = 2**24


def use_exact(n: int, d: int, exact: bool) -> bool:
    """Whether a rule scores ``n`` rows of length ``d`` with the exact path."""
    return exact or n * n * d <= EXACT_WORK


def compute_device() -> torch.device:
    """``cuda`` when this process sees a GPU, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def exact_sq_dists(x: torch.Tensor) -> np.ndarray:
    """``[K, K]`` squared Euclidean distances in float64, each pair summed from its coordinate
    differences; the upper triangle is mirrored so the matrix is exactly symmetric."""
    xd = x.double()
    d = torch.cdist(xd, xd, compute_mode=EXACT_MODE).square()
    upper = torch.triu(d, diagonal=1)
    return (upper + upper.T).numpy()


def exact_sq_dist_rows(xd: torch.Tensor, rows: Sequence[int]) -> np.ndarray:
    """Rows ``rows`` of :func:`exact_sq_dists` (same values bit for bit) from the float64 rows
    ``xd``: the per-pair sum does not depend on which side of the pair a row is on."""
    idx = torch.as_tensor(np.asarray(rows, dtype=np.int64))
    return torch.cdist(xd[idx], xd, compute_mode=EXACT_MODE).square().numpy()


def robust_center(x: torch.Tensor) -> torch.Tensor:
    """Float64 mean of the rows whose norm is at most the median norm (float32, two cheap
    passes). Any center gives the same distances; a far outlier would drag the plain mean and
    inflate the error bound of every row, so the large-norm half is left out."""
    norms = torch.linalg.vector_norm(x.float(), dim=1)
    keep = (norms <= norms.median()).to(x.dtype)
    return ((keep / keep.sum()) @ x).double()


@dataclass
class GramDistances:
    """Fast squared distances of ``x``'s rows and what is needed to bound and repair them."""

    x: torch.Tensor  # [n, d] the rows (CPU)
    d2: np.ndarray  # [n, n] float64, symmetric, zero diagonal, >= 0
    radius: np.ndarray  # [n] r_i >= ||x_i - mu||
    c: float  # |d2_ij - D_ij| <= c (r_i + r_j)^2
    group: np.ndarray  # [n] smallest position of a bit-identical row
    exact_calls: int = 0  # rows computed with the exact path (for tests and reports)
    screened: bool = False  # d2 from the float32 screen (:mod:`defenses.screen`)
    mu: torch.Tensor | None = field(default=None, repr=False)  # the screen's center
    tight: dict[int, np.ndarray] = field(default_factory=dict, repr=False)  # float64 rows
    tight_radius: np.ndarray | None = field(default=None, repr=False)
    _xd: torch.Tensor | None = field(default=None, repr=False)
    _rows: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def exact_rows(self, rows: Sequence[int]) -> np.ndarray:
        """``[len(rows), n]`` rows of the exact path's matrix (cached)."""
        todo = sorted({int(r) for r in rows} - set(self._rows))
        if todo:
            if self._xd is None:
                self._xd = self.x.double()
            for r, row in zip(todo, exact_sq_dist_rows(self._xd, todo), strict=True):
                self._rows[r] = row
            self.exact_calls += len(todo)
        return (
            np.stack([self._rows[int(r)] for r in rows])
            if len(rows)
            else np.zeros((0, len(self.radius)))
        )


def duplicate_groups(x: torch.Tensor, d2: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """``[n]``: for each row, the smallest position of a row equal to it bit for bit.

    Only rows with a partner whose fast distance could be 0 (``d2 <= bound``) are hashed."""
    n = len(d2)
    group = np.arange(n)
    iu, ju = np.nonzero(np.triu(d2 <= bound, 1))
    suspects = np.unique(np.concatenate([iu, ju]))
    first: dict[bytes, int] = {}
    rows = x.detach().cpu().contiguous()
    for r in suspects.tolist():
        key = hashlib.blake2b(rows[r].numpy().tobytes(), digest_size=16).digest()
        g = first.setdefault(key, r)
        if g != r and torch.equal(rows[g], rows[r]):
            group[r] = g
    return group


#: columns converted to float64 at a time, and row blocks of the symmetric product
GRAM_COLUMNS = 1024
GRAM_BLOCKS = 3


def centered_gram(x: torch.Tensor, mu: torch.Tensor) -> torch.Tensor:
    """``(x - mu) (x - mu)^T`` in float64, ``x - mu`` rounded once per entry.

    Columns are converted ``GRAM_COLUMNS`` at a time (no float64 copy of the whole matrix),
    and only the blocks on and above the diagonal of a ``GRAM_BLOCKS`` x ``GRAM_BLOCKS`` split
    of the rows are multiplied (6 of 9 blocks: 2/3 of the full product's flops); the lower
    blocks are mirrored. Each entry is still one float64 dot product summed over column chunks,
    so the error bound of the module docstring holds.
    """
    n, d = x.shape
    g = torch.zeros(n, n, dtype=torch.float64, device=x.device)
    edges = [round(i * n / GRAM_BLOCKS) for i in range(GRAM_BLOCKS + 1)]
    spans = [(a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a]
    # one float64 buffer for every column chunk: a fresh one per chunk paid its page faults
    # each time (~15% of the product at n = 1,000, d = 114,314 here)
    buf = torch.empty(n, min(GRAM_COLUMNS, d), dtype=torch.float64, device=x.device)
    for c0 in range(0, d, GRAM_COLUMNS):
        w = min(GRAM_COLUMNS, d - c0)
        y = buf[:, :w]
        y.copy_(x[:, c0 : c0 + w])
        y.sub_(mu[c0 : c0 + w])
        for i, (a, b) in enumerate(spans):
            for c, e in spans[i:]:
                g[a:b, c:e].addmm_(y[a:b], y[c:e].T)
    return torch.triu(g) + torch.triu(g, diagonal=1).T


def gram_sq_dists(x: torch.Tensor) -> GramDistances:
    """Squared distances through one float64 matrix multiply (see the module docstring)."""
    d = x.shape[1]
    dev = compute_device()
    mu = robust_center(x.to(dev))
    return distances_from_gram(x, centered_gram(x.to(dev), mu), 1.01 * gamma(d + 8), gamma(d))


def distances_from_gram(
    x: torch.Tensor, g: torch.Tensor, c: float, g_err: float, **extra: object
) -> GramDistances:
    """:class:`GramDistances` from the centered Gram matrix ``g`` of ``x``'s rows, whose
    diagonal is within ``g_err`` relative of the centered squared norms and whose distances
    are within ``c (r_i + r_j)^2`` of the true ones (``extra``: further fields)."""
    nu = g.diagonal().clone()
    d2 = nu[:, None] + nu[None, :] - 2.0 * g
    del g
    upper = torch.triu(d2, diagonal=1)
    d2 = (upper + upper.T).clamp_min_(0.0).cpu().numpy()
    nu_np = nu.cpu().numpy()
    radius = np.sqrt(np.maximum(nu_np, 0.0) / (1.0 - g_err)) * (1.0 + 4 * U64)
    bound = c * (radius[:, None] + radius[None, :]) ** 2
    group = duplicate_groups(x, d2, bound)
    d2, radius = share_copies(d2, radius, group)
    return GramDistances(x.detach().cpu(), d2, radius, c, group, **extra)  # type: ignore[arg-type]


def share_copies(
    d2: np.ndarray, radius: np.ndarray, group: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Give bit-identical rows their group's first row's distances (0 between them) and
    radius, so copies get equal fast scores (the matrix multiply may round them apart)."""
    if (group == np.arange(len(group))).all():
        return d2, radius
    return d2[np.ix_(group, group)], radius[group]  # the diagonal stays 0


def krum_bounds(
    gd: GramDistances,
    rows: np.ndarray,
    fast: np.ndarray,
    kth: np.ndarray,
    k: int,
    rounding: np.ndarray | float = 0.0,
) -> np.ndarray:
    """Bound on ``|fast - exact|`` for Krum-type scores of ``rows`` (:func:`score_bound` with
    ``gd``'s radii and constant)."""
    return score_bound(gd.radius[rows], gd.c, gd.x.shape[1], fast, kth, k, rounding)


def score_bound(
    r: np.ndarray,
    c: float,
    d: int,
    fast: np.ndarray,
    kth: np.ndarray,
    k: int,
    rounding: np.ndarray | float = 0.0,
) -> np.ndarray:
    """Bound on ``|fast - exact|`` for Krum-type scores of rows of radius ``r``, from
    distances within ``c (r_i + r_j)^2`` of the true ones.

    ``fast`` is the sum of the ``k`` smallest fast distances from each row to a set of others,
    ``kth`` an upper bound of the largest of those ``k``, ``rounding`` a bound on the rounding
    of ``fast`` itself. Every neighbour j in the fast or the exact k-set has
    ``D_ij <= T = kth + 2c (2 r_i + sqrt(kth))^2``, hence ``r_j <= r_i + sqrt(T)`` and each
    term is off by at most ``e = c (2 r_i + sqrt(T))^2``: ``|fast - math| <= k e``. The exact
    path's sum is within ``(gamma_{d+6} + gamma_k)`` relative of the math value.
    """
    kth = np.maximum(kth, 0.0)
    t = kth + 2 * c * (2 * r + np.sqrt(kth)) ** 2
    e = c * (2 * r + np.sqrt(t)) ** 2
    b = k * e + gamma(k) * np.abs(fast) + rounding
    rel = gamma(d + 6) + gamma(k)
    return (b + rel * (np.abs(fast) + b)) * (1 + 1e-9)
