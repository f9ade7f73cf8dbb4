"""FedProx (Li et al., MLSys 2020): proximal local objective and tolerated partial work.

Each client minimizes h_k(w; w^t) = F_k(w) + (mu/2) ||w - w^t||^2, and clients may run fewer local
epochs (gamma-inexact solutions) without being dropped; see ``straggler_fraction``.
"""

from __future__ import annotations

import functools

import torch

from simulator.algorithms.base import Algorithm
from simulator.training import LocalSpec


def proximal_term(params: dict[str, torch.Tensor], global_params: dict[str, torch.Tensor],
                  mu: float) -> torch.Tensor:
    """(mu / 2) * ||w - w^t||^2 over the trainable parameters."""
    return 0.5 * mu * sum(((params[n] - global_params[n]) ** 2).sum() for n in params)


class FedProx(Algorithm):
    name = "fedprox"

    def local_spec(self) -> LocalSpec:
        base = super().local_spec()
        if self.cfg.mu <= 0:
            return base
        reg = functools.partial(proximal_term, mu=self.cfg.mu)
        return LocalSpec(base.lr, base.batch_size, base.weight_decay, reg)
