"""Inner-product manipulation (IPM): every malicious client sends ``-eps * mean(benign)``.

References
----------
Xie, Koyejo and Gupta, "Fall of Empires: Breaking Byzantine-tolerant SGD by Inner Product
Manipulation", UAI 2019. A small ``eps`` (0.1) keeps the malicious rows close to the benign ones
so that distance-based rules accept them while the inner product of the aggregate with the true
gradient turns negative; a large ``eps`` (100) is the variant that breaks mean-like rules.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from attacks.base import ATTACKS, AttackContext, ModelAttack, reference_rows


@ATTACKS.register
class IPM(ModelAttack):
    """Send ``-eps * mean(benign)``.

    Parameters
    ----------
    eps : float, default 0.1
        Positive magnitude; Xie et al. also evaluate ``eps = 100``.
    """

    name: ClassVar[str] = "ipm"
    defaults: ClassVar[dict[str, Any]] = {"eps": 0.1}

    def check(self) -> None:
        self.number("eps", positive=True)

    def attack(self, malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        return (-self.params["eps"] * reference_rows(malicious, ctx).mean(dim=0)).unsqueeze(0)
