"""Min-Max and Min-Sum attacks (AGR-agnostic, optimized perturbation of the benign mean).

References
----------
Shejwalkar and Houmansadr, "Manipulating the Byzantine: Optimizing Model Poisoning Attacks and
Defenses for Federated Learning", NDSS 2021, Section IV-C. Every malicious client sends
``mean(benign) + gamma * p`` with ``gamma`` the largest value whose row stays as close to the
benign rows as the benign rows are to each other: in max distance (Min-Max) or in sum of squared
distances (Min-Sum).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from attacks.base import ATTACKS, AttackContext, ModelAttack, column_std, reference_rows

DIRECTIONS = ("std", "unit", "sign")


def perturbation(rows: torch.Tensor, direction: str) -> torch.Tensor:
    """``p``: ``-std(rows)``, ``-mean / ||mean||`` or ``-sign(mean)`` (zero when undefined)."""
    mean = rows.mean(dim=0)
    if direction == "std":
        return -column_std(rows)
    if direction == "unit":
        norm = float(mean.norm())
        return -mean / norm if norm > 0 else torch.zeros_like(mean)
    return -torch.sign(mean)


def search_gamma(
    rows: torch.Tensor,
    p: torch.Tensor,
    objective: str,
    gamma_init: float = 10.0,
    tau: float = 1e-5,
    max_iters: int = 100,
) -> float:
    """Largest ``gamma >= 0`` (within ``tau``) such that ``m = mean(rows) + gamma * p`` obeys

    - ``"minmax"``: ``max_i ||m - b_i|| <= max_{i,j} ||b_i - b_j||``;
    - ``"minsum"``: ``sum_i ||m - b_i||^2 <= max_j sum_i ||b_j - b_i||^2``.

    The feasible set is an interval ``[0, gamma*]`` (a convex function of ``gamma`` under a bound
    it meets at 0), so ``gamma`` is doubled from ``gamma_init`` until it fails (at most
    ``max_iters`` times; a zero ``p`` returns 0), then bisected until the bracket is below ``tau``.
    Distances use ``||d_i + gamma p||^2 = a_i + 2 gamma c_i + gamma^2 ||p||^2`` in float64.
    """
    rows = rows.to(torch.float64)
    p = p.to(torch.float64)
    pp = float(p @ p)
    if pp == 0.0:
        return 0.0
    d = rows.mean(dim=0, keepdim=True) - rows  # [B, P]
    a, c = (d * d).sum(dim=1), d @ p  # [B], [B]
    sq = torch.cdist(rows, rows).square()  # [B, B]
    if objective == "minmax":
        bound = float(sq.max())

        def score(g: float) -> float:
            return float((a + 2 * g * c + g * g * pp).max())
    else:
        bound = float(sq.sum(dim=1).max())

        def score(g: float) -> float:
            return float((a + 2 * g * c + g * g * pp).sum())

    bound *= 1 + 1e-12  # rounding at gamma = 0
    lo, hi = 0.0, float(gamma_init)
    for _ in range(max_iters):
        if score(hi) > bound:
            break
        lo, hi = hi, 2 * hi
    else:
        return lo
    for _ in range(max_iters):
        if hi - lo <= tau:
            break
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if score(mid) <= bound else (lo, mid)
    return lo


@ATTACKS.register
class MinMax(ModelAttack):
    """Send ``mean(benign) + gamma * p`` with ``gamma`` from :func:`search_gamma` (Min-Max).

    Parameters
    ----------
    direction : {"std", "unit", "sign"}, default "std"
        Perturbation ``p``: ``-std``, ``-unit(mean)`` or ``-sign(mean)`` of the benign rows.
    gamma_init : float, default 10.0
        First ``gamma`` tried (the paper's initial value).
    tau : float, default 1e-5
        Bisection stops when the bracket on ``gamma`` is this narrow.
    max_iters : int, default 100
        Cap on doublings and on bisection steps.
    """

    name: ClassVar[str] = "minmax"
    objective: ClassVar[str] = "minmax"
    defaults: ClassVar[dict[str, Any]] = {
        "direction": "std",
        "gamma_init": 10.0,
        "tau": 1e-5,
        "max_iters": 100,
    }

    def check(self) -> None:
        if self.params["direction"] not in DIRECTIONS:
            raise ValueError(
                f"attack {self.name!r}: parameter 'direction' must be one of "
                f"{list(DIRECTIONS)}, got {self.params['direction']!r}"
            )
        self.number("gamma_init", positive=True)
        self.number("tau", positive=True)
        it = self.params["max_iters"]
        if isinstance(it, bool) or not isinstance(it, int) or it < 1:
            raise ValueError(
                f"attack {self.name!r}: parameter 'max_iters' must be an int >= 1, got {it!r}"
            )

    def attack(self, malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        rows = reference_rows(malicious, ctx)
        p = perturbation(rows, self.params["direction"])
        gamma = search_gamma(
            rows,
            p,
            self.objective,
            self.params["gamma_init"],
            self.params["tau"],
            self.params["max_iters"],
        )
        return (rows.mean(dim=0) + gamma * p).unsqueeze(0)


@ATTACKS.register
class MinSum(MinMax):
    """Min-Sum: as :class:`MinMax` with the sum-of-squared-distances constraint."""

    name: ClassVar[str] = "minsum"
    objective: ClassVar[str] = "minsum"
