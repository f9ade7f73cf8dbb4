"""Sageflow's model-poisoning attack: the malicious client sends a scaled, negated model.

References
----------
Park et al., "Sageflow: Robust Federated Learning against Both Stragglers and Adversaries",
NeurIPS 2021, Section 5 (model update poisoning: a malicious device sends ``-0.1 * w``, where
``w`` is its locally trained model).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from attacks.base import ATTACKS, AttackContext, ModelAttack


@ATTACKS.register
class ScaleModel(ModelAttack):
    """Send the model ``factor * w`` with ``w = global + delta``, i.e. the update
    ``factor * (global + delta) - global``.

    Parameters
    ----------
    factor : float, default -0.1
        Multiplier applied to the malicious client's local model (Sageflow uses -0.1).
    """

    name: ClassVar[str] = "scale"
    defaults: ClassVar[dict[str, Any]] = {"factor": -0.1}

    def check(self) -> None:
        self.number("factor")

    def attack(self, malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        g = ctx.global_flat.reshape(1, -1).to(torch.float64)
        return self.params["factor"] * (g + malicious.to(torch.float64)) - g
