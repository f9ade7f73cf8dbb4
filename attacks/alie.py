"""ALIE ("A Little Is Enough"): every malicious client sends ``mu - z * sigma``.

References
----------
Baruch, Baruch and Goldberg, "A Little Is Enough: Circumventing Defenses For Distributed
Learning", NeurIPS 2019. ``mu`` and ``sigma`` are the per-coordinate mean and standard deviation
of the benign updates; with ``s = floor(n/2 + 1) - f`` supporters needed, ``z = Phi^{-1}((n-s)/n)``.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, ClassVar

import torch

from attacks.base import ATTACKS, AttackContext, ModelAttack, column_std, reference_rows


def alie_z(n: int, f: int) -> float:
    """Baruch et al.'s ``z_max`` for ``n`` rows of which ``f`` are malicious.

    ``s`` is clamped to ``[1, n - 1]`` so that ``z`` stays finite when ``f`` is a majority
    (the paper assumes a minority; there ``s >= 1`` holds anyway).
    """
    if n < 2:
        return 0.0
    s = min(max(math.floor(n / 2 + 1) - f, 1), n - 1)
    return NormalDist().inv_cdf((n - s) / n)


@ATTACKS.register
class ALIE(ModelAttack):
    """Send ``mean(benign) - z * std(benign)`` (per coordinate, std with ddof=1).

    Parameters
    ----------
    z : float or None, default None
        Override of ``z``; None derives it from ``n`` and ``f`` (:func:`alie_z`).
    """

    name: ClassVar[str] = "alie"
    defaults: ClassVar[dict[str, Any]] = {"z": None}

    def check(self) -> None:
        self.number("z", allow_none=True)

    def attack(self, malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        rows = reference_rows(malicious, ctx)
        z = self.params["z"]
        if z is None:
            z = alie_z(ctx.num_total, ctx.num_byzantine)
        return (rows.mean(dim=0) - z * column_std(rows)).unsqueeze(0)
