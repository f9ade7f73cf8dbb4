"""What a device actor hosts: many virtual clients and the code that trains a batch of them.

:class:`ClientTrainer` is a plain class. The Ray pool wraps it as an actor (``ray.remote``); the
in-process executor uses it directly, so tests exercise the same code without Ray. The training
set arrives once (a Ray object-store reference, read zero-copy) together with every client's
index array, so any actor can train any client (needed when an actor dies and its clients move).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simulator.models import ModelSpec
from simulator.training import FlatLayout, LocalSpec, train_clients


@dataclass(frozen=True)
class TrainTask:
    """One selected client's work this round."""

    client_id: int
    epochs: int
    seed: int
    num_samples: int = 0
    weight: float = -1.0  # >= 0: add weight * update to the actor's partial sum; < 0: return row
    poisoned: bool = False  # a malicious client under a data attack


def pack_tasks(tasks: list[TrainTask]) -> tuple[np.ndarray, np.ndarray]:
    """Tasks as an int64 ``[n, 5]`` array and float64 weights (cheaper to ship than n objects;
    seeds stay exact)."""
    ints = np.array([(t.client_id, t.epochs, t.seed, t.num_samples, t.poisoned) for t in tasks],
                    dtype=np.int64).reshape(-1, 5)
    return ints, np.array([t.weight for t in tasks], dtype=np.float64)


def unpack_tasks(packed: tuple[np.ndarray, np.ndarray]) -> list[TrainTask]:
    ints, weights = packed
    return [TrainTask(int(c), int(e), int(sd), int(n), float(w), bool(p))
            for (c, e, sd, n, p), w in zip(ints.tolist(), weights.tolist(), strict=True)]


class ClientTrainer:
    """Trains batches of clients that share one architecture.

    Parameters
    ----------
    model_spec : architecture of every client hosted here.
    x_train, y_train : the (feature-shifted, if configured) training set; numpy arrays.
    client_index : ``client_index[c]`` are the rows of client ``c``.
    threads : torch intra-op threads (1 per CPU actor).
    device : ``"cpu"`` or ``"cuda"``.
    """

    def __init__(self, model_spec: ModelSpec, x_train: np.ndarray, y_train: np.ndarray,
                 client_index: list[np.ndarray], threads: int | None = 1,
                 device: str = "cpu") -> None:
        if threads:
            torch.set_num_threads(threads)
        self.device = torch.device(device)
        self.model = model_spec.build(seed=0).to(self.device)
        self.layout = FlatLayout(self.model)
        self.x = torch.as_tensor(np.asarray(x_train)).to(self.device)
        self.y = torch.as_tensor(np.asarray(y_train)).to(self.device)
        self.client_index = client_index
        self.pid = os.getpid()

    def ping(self) -> int:
        return self.pid

    def configure(self, spec: LocalSpec, vectorize: bool) -> None:
        """Keep the round-invariant training settings (sent once, not every round)."""
        self.spec, self.vectorize = spec, vectorize

    def train_packed(self, global_flat: np.ndarray, packed: tuple[np.ndarray, np.ndarray],
                     starts: dict[int, np.ndarray] | None = None) -> dict[str, Any]:
        """:meth:`train` with tasks from :func:`pack_tasks` and the configured settings."""
        return self.train(global_flat, unpack_tasks(packed), self.spec, self.vectorize, starts)

    def train(self, global_flat: np.ndarray, tasks: list[TrainTask], spec: LocalSpec,
              vectorize: bool = True, starts: dict[int, np.ndarray] | None = None
              ) -> dict[str, Any]:
        """Train ``tasks`` from ``global_flat``; returns one update row per task, in order."""
        t0 = time.perf_counter()
        g = torch.as_tensor(np.asarray(global_flat), dtype=torch.float32).to(self.device)
        idx = [self.client_index[t.client_id] for t in tasks]
        out = train_clients(self.model, self.layout, g, self.x, self.y, idx,
                            [t.epochs for t in tasks], [t.seed for t in tasks], spec,
                            vectorize=vectorize, poisoned=[t.poisoned for t in tasks],
                            starts={i: torch.as_tensor(np.asarray(starts[t.client_id]),
                                                       dtype=torch.float32).to(self.device)
                                    for i, t in enumerate(tasks) if starts and
                                    t.client_id in starts})
        upd = out.updates
        w = torch.tensor([t.weight for t in tasks], dtype=torch.float32, device=self.device)
        finite = torch.isfinite(upd).all(dim=1)
        summed = (w >= 0) & finite
        # rows that are not summed are zeroed, so a non-finite row cannot poison the sum
        agg = ((w * summed) @ torch.where(summed[:, None], upd, 0.0)).double() \
            if bool(summed.any()) else None
        ret = (w < 0).cpu().numpy()
        return {
            "client_ids": np.array([t.client_id for t in tasks], dtype=np.int64),
            "losses": out.losses,
            "steps": out.steps,
            "num_samples": np.array([len(i) for i in idx], dtype=np.int64),
            "finite": finite.cpu().numpy(),
            "row_ids": np.array([t.client_id for t in tasks], dtype=np.int64)[ret],
            "updates": upd[torch.from_numpy(ret).to(self.device)].cpu().numpy(),
            "agg_sum": None if agg is None else agg.cpu().numpy(),
            "agg_weight": float((w.double() * summed).sum()),
            "seconds": time.perf_counter() - t0,
        }
