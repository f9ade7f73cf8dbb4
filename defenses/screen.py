"""Float32 screening of the pairwise distances for Krum and Multi-Krum at cohort scale.

At ``n^2 d >= 2^32`` (1,000 rows of either model) the float64 Gram product of
:mod:`defenses.distances` is most of a Krum round, and a float32 product runs at twice the
rate (AVX-512 here, and more on a GPU). Krum only needs the lowest score and Multi-Krum the
``m`` lowest, so the float32 distances screen the rows and only the few near the selection
boundary are decided by tighter means. Three tiers, each with a proved bound:

1. :func:`screen_sq_dists`: the rows are centered at a float32 point ``m`` (any center gives
   the same distances) and rounded to float32 (``|y^ - y| <= u |y|`` per entry, ``u = 2^-24``);
   the Gram product runs ``SCREEN_COLUMNS`` columns at a time in float32, each block's product
   added into a float64 accumulator. A block's dot product is within ``gamma_w`` (``w`` the
   block's columns) of its true value relative to the product of the block norms; by
   Cauchy-Schwarz the blocks' errors add to at most ``gamma_w ||y^_i|| ||y^_j||``. With the
   float64 additions and the rounding of the centered rows,
   ``|d2_ij - D_ij| <= c (r_i + r_j)^2``, ``c = 1.01 (gamma_w + 2 u + 2 gamma64_C + 4 u64)``
   (``C`` blocks): 6.1e-5 at ``w = 1024``. That is the worst case over every summation order;
   the measured error at 1,000 rows of the CNN is ~3e-8 of ``r_i r_j``.
2. :func:`tight_scores_of`: the rows still undecided get their distances to every row from a
   float64 product (the float64 path's bound, ~1e-11 relative), scored and bounded again.
3. The exact path (:meth:`~defenses.distances.GramDistances.exact_rows`) for what is left
   (ties, copies), as on the float64 path.

The selection is therefore the exact path's, as before. What changes is the reported Krum
score of a row: within :data:`SCREEN_RTOL` (1e-3) of the exact path's, with a proved bound,
instead of 1e-7 (in practice ~1e-6). Bulyan, whose ``n - 2f`` steps each need the order of
nearly every remaining row, keeps the float64 product.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from defenses.distances import (
    GRAM_BLOCKS,
    U64,
    GramDistances,
    compute_device,
    distances_from_gram,
    gamma,
    robust_center,
    score_bound,
)

#: unit roundoff of float32
U32 = 2.0**-24
#: from this many coordinate operations (``n^2 d``) Krum and Multi-Krum screen in float32
SCREEN_WORK = 2**32
#: columns a float32 block of the product (the bound grows with it, the time falls)
SCREEN_COLUMNS = 1024
#: a reported score on the screened path is within this share of the exact path's
SCREEN_RTOL = 1e-3


def gamma32(k: int) -> float:
    """``k u / (1 - k u)`` for float32: the bound on a k-term float32 dot product's error."""
    ku = k * U32
    return ku / (1.0 - ku)


def use_screen(n: int, d: int) -> bool:
    """Whether Krum and Multi-Krum screen ``n`` rows of length ``d`` in float32."""
    return n * n * d >= SCREEN_WORK


def screen_constant(d: int, columns: int = SCREEN_COLUMNS) -> tuple[float, float]:
    """``(c, g)``: the distance bound's constant and the Gram entries' relative error."""
    w = min(columns, d)
    g = gamma32(w) + 2 * gamma(-(-d // w))
    return 1.01 * (g + 2 * U32 + 4 * U64), g


def screened_gram(x: torch.Tensor, m: torch.Tensor, columns: int = SCREEN_COLUMNS) -> torch.Tensor:
    """``[n, n]`` float64: ``fl32(x - m) fl32(x - m)^T``, each ``columns``-wide block's product
    in float32 and the blocks added in float64; upper blocks only (as
    :func:`~defenses.distances.centered_gram`), the lower mirrored."""
    n, d = x.shape
    g = torch.zeros(n, n, dtype=torch.float64, device=x.device)
    edges = [round(i * n / GRAM_BLOCKS) for i in range(GRAM_BLOCKS + 1)]
    spans = [(a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a]
    pairs = [(s, t) for i, s in enumerate(spans) for t in spans[i:]]
    out = [torch.empty(s[1] - s[0], t[1] - t[0], device=x.device) for s, t in pairs]
    buf = torch.empty(n, min(columns, d), device=x.device)
    for c0 in range(0, d, columns):
        w = min(columns, d - c0)
        y = buf[:, :w]
        torch.sub(x[:, c0 : c0 + w], m[c0 : c0 + w], out=y)
        for ((a, b), (c, e)), o in zip(pairs, out, strict=True):
            torch.mm(y[a:b], y[c:e].T, out=o)
            g[a:b, c:e].add_(o)
    return torch.triu(g) + torch.triu(g, diagonal=1).T


def screen_sq_dists(x: torch.Tensor) -> GramDistances:
    """Tier 1 (module docstring): squared distances through a float32 product."""
    dev = compute_device()
    xd = x.to(dev).float()
    m = robust_center(xd).float()
    c, g_err = screen_constant(x.shape[1])
    g = screened_gram(xd, m)
    return distances_from_gram(x, g, c, g_err, screened=True, mu=m.cpu())


def tight_rows(gd: GramDistances, rows: Sequence[int]) -> np.ndarray:
    """``[len(rows), n]`` squared distances of ``rows`` to every row from one float64
    product centered at the screen's center (cached in ``gd.tight``; the first call also
    sets ``gd.tight_radius``). Copies (``gd.group``) share their group's first row's values."""
    todo = sorted({int(r) for r in rows} - set(gd.tight))
    if todo:
        x = gd.x
        n, d = x.shape
        dev = compute_device()
        idx = torch.as_tensor(todo, device=dev)
        mu = gd.mu.to(dev).double()  # type: ignore[union-attr]
        prod = torch.zeros(len(todo), n, dtype=torch.float64, device=dev)
        nu = torch.zeros(n, dtype=torch.float64, device=dev)
        buf = torch.empty(n, min(SCREEN_COLUMNS, d), dtype=torch.float64, device=dev)
        for c0 in range(0, d, SCREEN_COLUMNS):
            w = min(SCREEN_COLUMNS, d - c0)
            y = buf[:, :w]
            y.copy_(x[:, c0 : c0 + w])
            y.sub_(mu[c0 : c0 + w])
            prod.addmm_(y[idx], y.T)
            nu.add_(torch.linalg.vecdot(y, y))
        d2 = (nu[idx][:, None] + nu[None, :] - 2.0 * prod).clamp_min_(0.0).cpu().numpy()
        for t, r in enumerate(todo):
            d2[t, r] = 0.0
            gd.tight[r] = d2[t]
        if gd.tight_radius is None:
            nu_np = nu.cpu().numpy()
            gd.tight_radius = np.sqrt(np.maximum(nu_np, 0.0) / (1.0 - gamma(d))) * (1 + 4 * U64)
    return np.stack([gd.tight[int(r)] for r in rows])


def tight_scores_of(
    gd: GramDistances, rows: np.ndarray, alive: np.ndarray, neighbours: int
) -> tuple[np.ndarray, np.ndarray]:
    """Tier 2: ``(scores, bounds)`` of ``rows`` among the rows marked ``alive`` from float64
    distances (:func:`tight_rows` of each row's group's first row, columns read through the
    groups so copies are at distance 0)."""
    rows = np.asarray(rows, dtype=np.int64)
    reps = gd.group[rows]
    full = tight_rows(gd, reps)[:, gd.group]
    n = len(alive)
    vals = np.stack([full[t][alive & (np.arange(n) != r)] for t, r in enumerate(rows)])
    vals = np.sort(vals, axis=1)[:, :neighbours]
    scores = vals.sum(axis=1)
    c64 = 1.01 * gamma(gd.x.shape[1] + 8)
    r = gd.tight_radius[reps]  # type: ignore[index]
    return scores, score_bound(r, c64, gd.x.shape[1], scores, vals[:, -1], neighbours)
