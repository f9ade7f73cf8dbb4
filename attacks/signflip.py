"""Sign-flipping attack: each malicious client sends its honest update negated and scaled.

References
----------
Damaskinos et al., "AGGREGATHOR: Byzantine Machine Learning via Robust Gradient Aggregation",
MLSys 2019 (sign flip); Guo et al., "Siren: Byzantine-robust Federated Learning via Proactive
Alarming", SoCC 2021, whose experiments use a scale of 4.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from attacks.base import ATTACKS, AttackContext, ModelAttack


@ATTACKS.register
class SignFlip(ModelAttack):
    """Send ``-scale * delta`` in place of the honest update ``delta``.

    Parameters
    ----------
    scale : float, default 1.0
        Positive multiplier; Siren's experiments use 4.
    """

    name: ClassVar[str] = "signflip"
    defaults: ClassVar[dict[str, Any]] = {"scale": 1.0}

    def check(self) -> None:
        self.number("scale", positive=True)

    def attack(self, malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        return -self.params["scale"] * malicious.to(torch.float64)
