"""The algorithm interface: local objective hook, local work, server update, per-client state.

An algorithm decides (1) the client's local objective, through the ``regularizer`` it puts in the
:class:`~simulator.training.LocalSpec`; (2) how much local work each selected client does
(:meth:`Algorithm.client_epochs`, FedProx's variable work); (3) how the server turns the defended
aggregate into the next global model (:meth:`Algorithm.server_update`, where FedDyn's ``h`` or a
server optimizer lives). State is an explicit object returned and passed back, never a global, so
checkpoints capture it. MOON, FedDyn, SCAFFOLD and FedBN fit these hooks (FedBN: a ``shared_mask``
that keeps normalization entries out of the server update).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from simulator.config import AlgorithmConfig
from simulator.training import LocalSpec


@dataclass
class AlgorithmState:
    """Server-side state carried across rounds (checkpointed)."""

    server: dict[str, Any] = field(default_factory=dict)
    clients: dict[int, dict[str, Any]] = field(default_factory=dict)


class Algorithm:
    """FedAvg behaviour; subclasses override the hooks they change."""

    name = "fedavg"

    def __init__(self, cfg: AlgorithmConfig) -> None:
        self.cfg = cfg

    def local_spec(self) -> LocalSpec:
        """Client optimizer and local objective."""
        c = self.cfg
        return LocalSpec(lr=c.lr, batch_size=c.batch_size, weight_decay=c.weight_decay)

    def client_epochs(self, num_selected: int, rng: np.random.Generator) -> np.ndarray:
        """Local epochs of each selected client, and (via ``partial``) who did partial work.

        With ``straggler_fraction`` > 0, that fraction of the selected clients runs
        x ~ U{1..E} epochs (Li et al., MLSys 2020, Sec. 5.2); the rest run E.
        """
        e = np.full(num_selected, self.cfg.local_epochs, dtype=np.int64)
        n_strag = int(round(self.cfg.straggler_fraction * num_selected))
        if n_strag:
            who = rng.choice(num_selected, size=n_strag, replace=False)
            e[who] = rng.integers(1, self.cfg.local_epochs + 1, size=n_strag)
        return e

    def keep_partial_work(self) -> bool:
        """Whether updates of clients that did partial work are aggregated."""
        return not self.cfg.drop_stragglers

    def init_state(self, global_flat: torch.Tensor) -> AlgorithmState:
        return AlgorithmState()

    def server_update(self, global_flat: torch.Tensor, delta: torch.Tensor,
                      state: AlgorithmState) -> torch.Tensor:
        """New global model from the defended aggregate update ``delta`` ([P])."""
        return global_flat + self.cfg.server_lr * delta
