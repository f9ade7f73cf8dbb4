"""What the server evaluates: the test set, public/root-set scores of candidate models, a
client's holdout (Siren's alarm), the server's own root-set update (FLTrust) and backdoor
success. All of it runs in the driver on the federation's model template."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from simulator.rounds import client_seeds
from simulator.setup import Federation
from simulator.training import LocalSpec, evaluate, score_models, train_clients


class ServerEval:
    """Evaluation helpers bound to one federation."""

    def __init__(self, fed: Federation, seed: int, local_epochs: int, spec: LocalSpec) -> None:
        self.fed, self.seed, self.local_epochs, self.spec = fed, seed, local_epochs, spec

    def test(self, flat: torch.Tensor) -> tuple[float, float]:
        """Accuracy and loss on the test set."""
        f = self.fed
        return evaluate(f.model, f.layout, flat, f.test_x, f.test_y)

    def score_models(self, models: torch.Tensor) -> dict[str, np.ndarray]:
        """Accuracy, loss and mean softmax entropy of each model row on the public set."""
        f = self.fed
        return score_models(f.model, f.layout, models, f.public_x, f.public_y)

    def holdout_accuracy(self, flat: torch.Tensor, rows: np.ndarray) -> float:
        """Accuracy of a model on some training-set rows (a client's holdout)."""
        f = self.fed
        x, y = torch.from_numpy(f.x_train[rows]), torch.from_numpy(f.y_train[rows])
        return evaluate(f.model, f.layout, flat, x, y)[0]

    def server_update(self, rnd: int, global_flat: torch.Tensor) -> torch.Tensor:
        """The global model trained on the public set (one client's worth of local work)."""
        f = self.fed
        seed = int(client_seeds(self.seed, rnd, np.array([2**31 - 1]))[0])
        out = train_clients(f.model, f.layout, global_flat, f.public_x, f.public_y,
                            [np.arange(len(f.public_y))], [self.local_epochs], [seed], self.spec)
        return out.updates[0]

    @torch.no_grad()
    def attack_success_rate(self, global_flat: torch.Tensor, trigger: Any) -> float | None:
        """Backdoor success: share of non-target test samples classified as the target once
        the trigger is stamped on them (None without a backdoor)."""
        if trigger is None:
            return None
        from attacks.backdoor import attack_success_rate

        f = self.fed
        f.layout.load(f.model, global_flat)
        f.model.eval()
        pred = f.model(trigger.stamp(f.test_x)).argmax(1)
        return attack_success_rate(pred, f.test_y, trigger.target)
