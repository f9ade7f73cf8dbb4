"""FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020).

Each client minimizes h_k(w; w^t) = F_k(w) + (mu/2) ||w - w^t||^2 over the trainable parameters,
and clients may run fewer local epochs (gamma-inexact solutions) without being dropped; see the
general ``straggler_fraction`` / ``drop_stragglers`` settings. Departure: the paper's clients use
plain SGD; here the shared client optimizer may add momentum or weight decay.
"""

from __future__ import annotations

import torch

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm
from simulator.algorithms.params import non_negative
from simulator.training.step import Step


def proximal_term(flat: torch.Tensor, global_flat: torch.Tensor, mu: float) -> torch.Tensor:
    """(mu / 2) * ||w - w^t||^2 of one client's trainable vector."""
    return 0.5 * mu * ((flat - global_flat) ** 2).sum()


@register
class FedProx(Algorithm):
    name = "fedprox"
    params = {"mu": non_negative("proximal coefficient mu (0 = FedAvg's objective)", 0.0)}

    def client_loss(self, s: Step) -> torch.Tensor:
        if self.p["mu"] == 0:
            return s.ce
        return s.ce + proximal_term(s.flat, s.global_flat, self.p["mu"])
