"""Geometric median by the smoothed Weiszfeld algorithm: RFA (Pillutla et al., 2019).

References
----------
K. Pillutla, S. M. Kakade, Z. Harchaoui. "Robust Aggregation for Federated Learning".
arXiv:1912.13445, 2019 (IEEE Trans. Signal Processing, 2022).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from defenses.base import DEFENSES, AggregateResult, DefenseContext, UpdateBatch, Verdict
from defenses.blocked import mean_pass
from defenses.bucketing import BucketableDefense
from defenses.distances import compute_device
from defenses.krum import check_count


def check_positive(rule: str, param: str, value: Any, allow_zero: bool = False) -> float:
    """A finite float ``> 0`` (``>= 0`` with ``allow_zero``); else ValueError naming it."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        raise ValueError(
            f"defense {rule!r}: {param} {value!r} invalid; valid: finite float "
            f"{'>=' if allow_zero else '>'} 0"
        )
    return float(value)


def check_unit(rule: str, param: str, value: Any, include_one: bool = False) -> float:
    """A real in ``(0, 1)`` (``(0, 1]`` with ``include_one``); else ValueError naming it."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and 0 < value
        and (value <= 1 if include_one else value < 1)
    )
    if not ok:
        raise ValueError(
            f"defense {rule!r}: {param} {value!r} invalid; valid: 0 < {param} "
            f"{'<=' if include_one else '<'} 1"
        )
    return float(value)


#: rows x columns from which the CPU path is :func:`weiszfeld_blocked` (smaller rounds keep the
#: float64-copy loop, and with it the exact values of every small table)
BLOCKED_WORK = 2**24


@DEFENSES.register
class GeoMedDefense(BucketableDefense):
    """Sample-weighted geometric median ``argmin_v sum_k a_k ||v - u_k||`` (RFA).

    Parameters
    ----------
    nu : float
        Smoothing: distances below ``nu`` count as ``nu`` (default 1e-6), > 0.
    max_iter : int
        Weiszfeld iterations at most (default 100), >= 1.
    tol : float
        Stop when the objective improves by less than ``tol`` times its value (default 1e-10),
        >= 0. (A loose ``tol`` stops early when a far outlier dominates the objective.)

    Notes
    -----
    ``a_k = n_k / sum n``. Starting from the weighted mean, each step sets
    ``beta_k = a_k / max(nu, ||v - u_k||)`` and ``v = sum_k beta_k u_k / sum_k beta_k``. The
    aggregate is exactly ``sum_k w_k u_k`` with the last normalized Weiszfeld weights ``w``; every
    row is kept with ``weight = score = w_k``.

    Two implementations of the same iteration. Small rounds (``n d < 2^24``) and rounds on a GPU
    keep a float64 copy of the rows and make, per iteration, one pass of row distances
    (``cdist`` without the Gram shortcut: no cancellation) and one matrix-vector product.
    Cohort-scale rounds on the CPU use :func:`weiszfeld_blocked`: one blocked pass over the
    float32 rows per iteration and no float64 copy (~7x faster at 1,000 rows of the CNN, and
    914 MB less memory there); it agrees with the other to rounding (tests: 1e-12 relative).
    """

    name = "geomed"

    def __init__(self, nu: float = 1e-6, max_iter: int = 100, tol: float = 1e-10) -> None:
        self.nu = check_positive(self.name, "nu", nu)
        self.max_iter = check_count(self.name, "max_iter", max_iter, 1)
        self.tol = check_positive(self.name, "tol", tol, allow_zero=True)

    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        order = np.argsort(batch.client_ids, kind="stable")  # row-order independent sums
        a = torch.from_numpy(batch.num_samples[order].astype(np.float64))
        if not bool((a > 0).all()):
            raise ValueError(f"defense {self.name!r}: needs num_samples > 0 for every row")
        dev = compute_device()
        x = batch.updates.to(dev)
        if not np.array_equal(order, np.arange(len(order))):
            x = x[torch.from_numpy(order).to(dev)]
        a = (a / a.sum()).to(dev)
        if dev.type == "cpu" and x.numel() >= BLOCKED_WORK:
            v, w = weiszfeld_blocked(x, a, self.nu, self.max_iter, self.tol)
        else:
            v, w = weiszfeld(x.double(), a, self.nu, self.max_iter, self.tol)
        weights = np.empty(len(batch))
        weights[order] = w.cpu().numpy()
        verdicts = tuple(
            Verdict(int(c), True, float(wi), float(wi))
            for c, wi in zip(batch.client_ids, weights, strict=True)
        )
        return AggregateResult(v.cpu().to(batch.updates.dtype), verdicts)


def row_distances(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``[n]``: ``||x_i - v||`` summed from the coordinate differences (no ``x - v`` matrix)."""
    return torch.cdist(x, v[None], compute_mode="donot_use_mm_for_euclid_dist")[:, 0]


def smoothed_weiszfeld(
    start: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    step: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    a: torch.Tensor,
    nu: float,
    max_iter: int,
    tol: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The smoothed Weiszfeld loop: ``(v, last normalized weights)``.

    ``start()`` gives the weighted mean and the rows' distances to it, ``step(w)`` the point
    ``w @ x`` and the distances to it; one call per iteration, whose distances give both the
    objective (stopping test) and the next weights.
    """
    v, dist = start()
    dist = dist.clamp_min(nu)
    obj = float((a * dist).sum())
    w = a
    for _ in range(max_iter):
        beta = a / dist
        w = beta / beta.sum()
        v, dist = step(w)
        dist = dist.clamp_min(nu)
        new = float((a * dist).sum())
        done = abs(obj - new) <= tol * new
        obj = new
        if done:
            break
    return v, w


def weiszfeld(
    x: torch.Tensor, a: torch.Tensor, nu: float, max_iter: int, tol: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`smoothed_weiszfeld` on a float64 copy of the rows: per iteration one
    matrix-vector product and one pass of row distances."""

    def at(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return v, row_distances(x, v)

    return smoothed_weiszfeld(lambda: at(a @ x), lambda w: at(w @ x), a, nu, max_iter, tol)


def weiszfeld_blocked(
    x: torch.Tensor,
    a: torch.Tensor,
    nu: float,
    max_iter: int,
    tol: float,
    block: int | None = None,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`smoothed_weiszfeld` on CPU rows of any float dtype, one blocked pass an iteration
    (:func:`~defenses.blocked.mean_pass`), without a float64 copy of ``x``.

    The first pass gives the weighted mean ``c`` and ``r_i = ||x_i - c||^2`` summed from the
    coordinate differences. Each later pass gives ``v = w @ x`` and ``p_i = x_i . (v - c)``,
    and ``||x_i - v||^2 = r_i - 2 (p_i - c . delta) + ||delta||^2`` with ``delta = v - c``.
    Centring at ``c`` keeps the cancellation to the rows' spread: the rounding error is about
    ``d u (||x_i - c|| + ||v - c||) ||v - c||`` (``u = 2^-53``), not ``d u ||x_i||^2``.
    """
    kw = {"threads": threads, **({"block": block} if block else {})}
    c, r = mean_pass(x, a, **kw)

    def step(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v, p = mean_pass(x, w, centre=c, **kw)
        delta = v - c
        d2 = r - 2.0 * (p - float(c @ delta)) + float(delta @ delta)
        return v, d2.clamp_min(0.0).sqrt()

    return smoothed_weiszfeld(lambda: (c, r.sqrt()), step, a, nu, max_iter, tol)


def weiszfeld_reference(
    x: torch.Tensor, a: torch.Tensor, nu: float, max_iter: int, tol: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loop before the cohort-scale rewrite (two ``(x - v).norm`` per iteration); kept as
    the reference for tests and ``benchmarks/defense_cost.py``."""
    v = a @ x
    obj = float((a * (x - v).norm(dim=1).clamp_min(nu)).sum())
    w = a
    for _ in range(max_iter):
        beta = a / (x - v).norm(dim=1).clamp_min(nu)
        w = beta / beta.sum()
        v = w @ x
        new = float((a * (x - v).norm(dim=1).clamp_min(nu)).sum())
        done = abs(obj - new) <= tol * new
        obj = new
        if done:
            break
    return v, w
