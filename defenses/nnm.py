"""Nearest-neighbour mixing (NNM): each row is replaced by the mean of its ``n - F`` nearest
rows before a robust rule sees the round.

References
----------
Y. Allouah, S. Farhadkhani, R. Guerraoui, N. Gupta, R. Pinot, J. Stephan. "Fixing by Mixing:
A Recipe for Optimal Byzantine ML under Heterogeneity". AISTATS 2023.

Under heterogeneous (non-IID) clients the benign rows are far apart, and rules built for IID
rows (Krum, median, trimmed mean, Bulyan) then discard much of the benign signal: Krum keeps one
of ~100 small non-IID updates. NNM averages each row with its ``n - F`` nearest rows (itself
included); a mixed benign row then sits near the benign mean, while at most ``F`` rows of any
neighbourhood are Byzantine, so the mixed rows' spread shrinks and the rule keeps nearly all
of the benign signal. The paper proves that any (f, kappa)-robust rule composed with NNM reaches
the optimal error under heterogeneity.

Departures from the paper:

- rows are averaged with their sample counts as weights (the paper averages uniformly; with
  equal counts it is the paper's rule), as :mod:`defenses.bucketing` does;
- neighbours are ranked by float64 squared distance (the exact per-pair path for small rounds,
  the Gram matrix product of :mod:`defenses.distances` from ``n^2 d > EXACT_WORK``: two rows
  within its proved error bound of each other may rank either way, the same way on every run),
  ties broken by client id so the mix does not depend on arrival order;
- mixed row ``i`` stands for client ``i``: it keeps the client's id, sample count and base
  round, and the client's verdict (kept, weight, score, reason) is the rule's verdict of the
  mixed row. A verdict's weight is therefore the mixed row's share of the aggregate; a client
  whose own mix is rejected still reaches the aggregate through its neighbours' mixes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from defenses.base import AggregateResult, DefenseContext, PreconditionError, UpdateBatch
from defenses.distances import exact_sq_dists, gram_sq_dists, use_exact

if TYPE_CHECKING:
    from defenses.base import Defense

#: how neighbours are ranked: ``"distance"`` (the paper's Euclidean distance) or ``"angle"``
#: (ours: the angle between rows, after the rows longer than the ``(F + 1)``-th largest norm
#: are clipped to it)
NNM_RANKS = ("distance", "angle")

#: columns mixed at a time: bounds the float64 working copy to ``n * MIX_COLUMNS`` values
MIX_COLUMNS = 8192


def check_nnm(rule: str, value: object) -> int:
    """The ``nnm`` parameter of a bucketable rule: an integer >= 0 (0 = no mixing)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"defense {rule!r}: nnm {value!r} invalid; valid: integer >= 0")
    return int(value)


def nnm_precondition(n: int, f: int) -> str | None:
    """Mixing needs a Byzantine minority: ``n > 2F``; None when ``n`` rows are fine."""
    return None if n > 2 * f else f"n > 2F for nearest-neighbour mixing (n={n}, F={f})"


def check_rank(rule: str, value: object) -> str:
    """The ``nnm_rank`` parameter: one of :data:`NNM_RANKS`."""
    if not isinstance(value, str) or value not in NNM_RANKS:
        raise ValueError(f"defense {rule!r}: nnm_rank {value!r} invalid; valid: {list(NNM_RANKS)}")
    return value


def row_norms(x: torch.Tensor) -> np.ndarray:
    """``[n]`` float64 Euclidean norms of the rows (no float64 copy of ``x``)."""
    return torch.linalg.vector_norm(x, dim=1, dtype=torch.float64).numpy()


def clip_scales(norms: np.ndarray, f: int) -> np.ndarray:
    """``[n]`` float64 factors that bring every row longer than the ``(f + 1)``-th largest of
    ``norms`` down to it (1 for the others).

    With at most ``f`` Byzantine rows the cap is at most the largest benign norm, so after it no
    row is longer than some benign row; at most ``f`` rows change."""
    scales = np.ones(len(norms))
    if 0 < f < len(norms):
        cap = np.sort(norms)[::-1][f]
        over = norms > cap
        scales[over] = cap / norms[over]
    return scales


def sq_dists(
    x: torch.Tensor, rank: str = "distance", norms: np.ndarray | None = None
) -> np.ndarray:
    """``[n, n]`` float64 squared distances of the rows (``rank="distance"``) or of the rows
    scaled to unit length (``"angle"``: ``2 - 2 cos``; a zero row stays zero): exact for small
    rounds, the Gram product at scale (for angles, ``cos_ij = (|x_i|^2 + |x_j|^2 - D_ij) /
    (2 |x_i| |x_j|)`` from the rows' own distances, so no scaled copy of the rows is made).
    ``norms``: the rows' :func:`row_norms` when the caller has them."""
    n, d = x.shape
    if use_exact(n, d, False):
        if rank == "angle":
            nt = torch.from_numpy(row_norms(x) if norms is None else norms)[:, None]
            x = x * (1.0 / torch.where(nt > 0, nt, 1.0)).to(x.dtype)
        return exact_sq_dists(x)
    d2 = gram_sq_dists(x).d2
    if rank == "distance":
        return d2
    norms = row_norms(x) if norms is None else norms
    nz = norms > 0
    cos = (norms[:, None] ** 2 + norms[None, :] ** 2 - d2) / (
        2.0 * np.where(nz, norms, 1.0)[:, None] * np.where(nz, norms, 1.0)[None, :]
    )
    a2 = 2.0 - 2.0 * np.clip(cos, -1.0, 1.0)
    # a zero row stays zero: 1 from every unit row, 0 from other zero rows
    a2[~nz, :] = 1.0
    a2[:, ~nz] = 1.0
    a2[np.ix_(~nz, ~nz)] = 0.0
    np.fill_diagonal(a2, 0.0)
    return a2


def neighbourhoods(d2: np.ndarray, client_ids: np.ndarray, keep: int) -> np.ndarray:
    """``[n, keep]``: for each row, the positions of its ``keep`` nearest rows (itself
    included, at distance 0), nearest first, ties broken by client id."""
    ids = np.broadcast_to(np.asarray(client_ids, dtype=np.int64), d2.shape)
    # a row's own distance is set to -1 so that it always leads its neighbourhood, even when a
    # bit-identical copy with a smaller client id is also at distance 0
    own = np.where(np.eye(len(d2), dtype=bool), -1.0, d2)
    return np.lexsort((ids, own), axis=-1)[:, :keep]


def mixing_matrix(hoods: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """``[n, n]`` row-stochastic float64: row ``i`` weighs the rows of ``hoods[i]`` by their
    sample counts (uniformly when they all hold 0 samples)."""
    n = hoods.shape[0]
    s = np.asarray(samples, dtype=np.float64)[hoods]
    total = s.sum(axis=1, keepdims=True)
    w = np.where(total > 0, s / np.where(total > 0, total, 1.0), 1.0 / hoods.shape[1])
    m = np.zeros((n, n))
    np.put_along_axis(m, hoods, w, axis=1)
    return m


def mix_rows(x: torch.Tensor, m: np.ndarray) -> torch.Tensor:
    """``m @ x`` in float64, ``MIX_COLUMNS`` columns at a time, returned in ``x``'s dtype."""
    w = torch.from_numpy(m)
    out = torch.empty_like(x)
    for c0 in range(0, x.shape[1], MIX_COLUMNS):
        cols = x[:, c0 : c0 + MIX_COLUMNS].double()
        out[:, c0 : c0 + MIX_COLUMNS] = (w @ cols).to(x.dtype)
    return out


def mixed(
    rule: Defense, batch: UpdateBatch, ctx: DefenseContext, f: int, rank: str = "distance"
) -> AggregateResult:
    """``rule`` on the nearest-neighbour mixes of the rows (each the sample-weighted mean of
    its ``n - f`` nearest rows, nearest by ``rank``: ``"distance"`` or ``"angle"``, the latter
    mixing the rows scaled by :func:`clip_scales`); client ``i``'s verdict is the rule's
    verdict of mixed row ``i``."""
    n = len(batch)
    if (why := nnm_precondition(n, f)) is not None:
        raise PreconditionError(f"defense {rule.name!r}: needs {why}")
    norms = row_norms(batch.updates) if rank == "angle" else None
    hoods = neighbourhoods(sq_dists(batch.updates, rank, norms), batch.client_ids, n - f)
    m = mixing_matrix(hoods, batch.num_samples)
    if norms is not None:  # angles ignore the clip; the mix folds it into its columns
        m = m * clip_scales(norms, f)[None, :]
    inner = UpdateBatch(
        mix_rows(batch.updates, m),
        batch.client_ids,
        batch.num_samples,
        batch.base_rounds,
        batch.signals,
    )
    return rule.aggregate(inner, ctx)
