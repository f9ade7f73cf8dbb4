"""KT-pFL's knowledge-coefficient matrix (Zhang et al., NeurIPS 2021, Eq. 7) as plain tensor
functions of the round's predictions, so each is checkable by hand.

Notation: K clients of the round, their soft predictions ``s`` ``[K, M, C]`` on the M public
samples (softmax at temperature T: every row a distribution), ``c`` ``[K, K]`` with ``c[m, n]``
the weight of client m's predictions in client n's target ``t_n = sum_m c[m, n] s_m``, and
``w`` ``[K]`` the clients' data shares D_n / D. The objective of Eq. 7 is

    F(c) = lam * sum_n w_n * (1/M) sum_x KL(t_n(x) || s_n(x)) + rho * ||c - 1/K||^2,

the paper's sum over the public set taken as a mean (a rescaling of the step size eta_3, which
then does not depend on |D_r|). Its gradient (:func:`coefficient_grad`) is

    dF/dc[m, n] = lam * w_n * (1/M) sum_x sum_k s_m[x, k] * (log t_n[x, k] - log s_n[x, k] + 1)
                  + 2 rho (c[m, n] - 1/K).

:func:`coefficient_step` takes one step of size ``lr`` and projects each column onto the
probability simplex (Euclidean projection, :func:`project_columns`): the paper leaves c
unconstrained, but a target with a negative or unnormalized weight is no distribution and its
KL is undefined; the projection keeps every ``t_n`` a convex mix of predictions. Since each
column of the simplex sums to 1, the constant ``+1`` of the gradient shifts a column uniformly
and the projection cancels it.
"""

from __future__ import annotations

import torch


def targets(c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``[K, M, C]`` personalized targets ``t_n = sum_m c[m, n] s_m``."""
    return torch.einsum("mn,mxk->nxk", c, s)


def coefficient_grad(
    c: torch.Tensor, s: torch.Tensor, w: torch.Tensor, lam: float, rho: float
) -> torch.Tensor:
    """``[K, K]`` the gradient of the module's ``F`` at ``c`` (float64 inside)."""
    c64, s64, w64 = c.double(), s.double(), w.double()
    k, m = s.shape[0], s.shape[1]
    t = targets(c64, s64)
    # a float32 softmax can underflow to 0: logs are floored at float32's smallest normal
    tiny = torch.finfo(torch.float32).tiny
    ratio = torch.log(t.clamp_min(tiny)) - torch.log(s64.clamp_min(tiny)) + 1.0  # [n, M, C]
    g = torch.einsum("mxk,nxk->mn", s64, ratio) / m
    return lam * g * w64[None, :] + 2.0 * rho * (c64 - 1.0 / k)


def project_columns(c: torch.Tensor) -> torch.Tensor:
    """Each column of ``c`` projected onto the probability simplex (the closest
    non-negative column summing to 1 in Euclidean distance; Duchi et al., ICML 2008)."""
    k = c.shape[0]
    u = torch.sort(c, dim=0, descending=True).values
    css = torch.cumsum(u, dim=0) - 1.0
    j = torch.arange(1, k + 1, dtype=c.dtype).unsqueeze(1)
    support = (u - css / j) > 0  # [K, K]: a prefix of each sorted column, never empty
    r = support.sum(0)  # size of each column's support
    theta = css.gather(0, (r - 1).unsqueeze(0)) / r.to(c.dtype)
    return torch.clamp(c - theta, min=0.0)


def coefficient_step(
    c: torch.Tensor, s: torch.Tensor, w: torch.Tensor, lam: float, rho: float, lr: float
) -> torch.Tensor:
    """One projected gradient step on ``F``: ``project_columns(c - lr * dF/dc)`` (float64)."""
    return project_columns(c.double() - lr * coefficient_grad(c, s, w, lam, rho))
