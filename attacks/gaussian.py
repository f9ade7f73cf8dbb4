"""Gaussian attack: each malicious client sends pure noise instead of its update.

References
----------
Blanchard et al., "Machine Learning with Adversaries: Byzantine Tolerant Gradient Descent",
NeurIPS 2017 (the Gaussian Byzantine worker); Fang et al., "Local Model Poisoning Attacks to
Byzantine-Robust Federated Learning", USENIX Security 2020 (used as a baseline).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from attacks.base import ATTACKS, AttackContext, ModelAttack


@ATTACKS.register
class Gaussian(ModelAttack):
    """Send ``N(0, sigma^2)`` noise, i.i.d. per coordinate, drawn from ``ctx.rng``.

    Parameters
    ----------
    sigma : float, default 1.0
        Standard deviation of the noise (> 0).
    """

    name: ClassVar[str] = "gaussian"
    defaults: ClassVar[dict[str, Any]] = {"sigma": 1.0}

    def check(self) -> None:
        self.number("sigma", positive=True)

    def attack(self, malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        noise = ctx.rng.standard_normal(tuple(malicious.shape), dtype=np.float32)
        return torch.from_numpy(noise) * np.float32(self.params["sigma"])
