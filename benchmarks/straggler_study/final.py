"""The straggler study's figures of a run's final model: its accuracy on the data of the slowest
and of the fastest devices, and its training loss over every client's data."""

from __future__ import annotations

from typing import Any

import numpy as np


def quartile_accuracy(sim: Any, n: int = 200) -> dict[str, float]:
    """Accuracy of the final model on the training data of ``n`` devices drawn from the slowest
    and from the fastest quartile of compute speed (ms per sample)."""
    from simulator.rng import stream

    ms = sim.fed.population.compute_ms_per_sample
    lo, hi = np.quantile(ms, [0.25, 0.75])
    rng = stream(sim.cfg.experiment.seed, 0, 999)
    out = {}
    for name, pool in (
        ("slow_q_accuracy", np.flatnonzero(ms >= hi)),
        ("fast_q_accuracy", np.flatnonzero(ms <= lo)),
    ):
        ids = np.sort(rng.choice(pool, min(n, len(pool)), replace=False))
        parts = sim.fed.arrays(sim.train_clients, ids)
        x = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        out[name] = sim.server.accuracy_on(sim.global_flat, x, y)
    return out


def global_train_loss(sim: Any) -> float:
    """Mean cross-entropy of the global model over all clients' training samples."""
    import torch

    from simulator.training.flat import evaluate

    f = sim.fed
    parts = f.arrays(sim.train_clients, np.arange(f.num_clients))
    x = torch.from_numpy(np.concatenate([p[0] for p in parts]))
    y = torch.from_numpy(np.concatenate([p[1] for p in parts]))
    return float(evaluate(f.model, f.layout, sim.global_flat, x, y)[1])
