"""The in-process executor: the pool's interface over one trainer in this process (small
rounds, tests, debugging)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from actors.client_inputs import ClientTransform
from actors.merge import merge_results
from actors.replace import Replace
from actors.request import TrainRequest
from actors.trainer import ClientTrainer
from simulator.data.clients import ClientData
from simulator.training.models import ModelSpec


class LocalExecutor:
    """Runs every request in this process, one after another."""

    def __init__(
        self,
        model_spec: ModelSpec | Sequence[ModelSpec],
        x: np.ndarray,
        y: np.ndarray,
        clients: ClientData,
        transform: ClientTransform | None = None,
        num_workers: int = 1,
    ) -> None:
        self.trainer = ClientTrainer(model_spec, x, y, clients, transform, threads=None)
        self.num_workers = num_workers

    def configure(self, *settings: Any) -> None:
        self.trainer.configure(*settings)

    def actor_nodes(self) -> list[str]:
        """Always empty: there are no actors, every request runs in this process."""
        return []

    def kinds(self) -> list[str]:
        """``"local"`` for each worker."""
        return ["local"] * self.num_workers

    def run(
        self,
        requests: list[TrainRequest],
        global_flat: np.ndarray,
        shared: dict[str, np.ndarray] | None = None,
        replace: Replace | None = None,
    ) -> dict[str, Any]:
        """Train the requests one after another; each answer is tagged with its request index
        as ``actor`` and kind ``"local"`` (``replace`` is unused: nothing dies here)."""
        order = [t.client_id for r in requests for t in r.tasks]
        parts = [
            {**self.trainer.train(global_flat, r, shared), "actor": i, "kind": "local"}
            for i, r in enumerate(requests)
            if r.tasks
        ]
        return merge_results(parts, order)

    def shutdown(self) -> None:
        pass
