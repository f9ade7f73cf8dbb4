"""What a round sends one worker: its clients' tasks, their client-state rows, start models,
and which updates to add into the worker's partial sum (:class:`TrainRequest`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TrainTask:
    """One selected client's work this round."""

    client_id: int
    epochs: int
    seed: int
    num_samples: int = 0
    poisoned: bool = False  # a malicious client under a data attack


@dataclass
class TrainRequest:
    """One worker's share of a round.

    Attributes
    ----------
    tasks : the clients to train, in order.
    summed : ``[n]`` bool, or None: True where the update is added, times ``weights``, into the
        worker's partial sum instead of being returned as a row (linear rules; never for rows
        a model attack, a defense or the ledger needs).
    weights : ``[n]`` float64 aggregation weights of the summed updates (from the defense).
    starts : client id -> ``[P]`` start model, for clients that do not start from the global
        model (Siren's alarming clients, parameters kept on the client).
    state : table -> ``[n, ...]`` client-state rows of the tasks' clients, in task order.
    chunks : sizes of the consecutive stacked chunks the tasks are trained in (summing to ``n``),
        or None for one chunk of all of them (a placement's sort-and-chunk schedule).
    """

    tasks: list[TrainTask]
    summed: np.ndarray | None = None
    weights: np.ndarray | None = None
    starts: dict[int, np.ndarray] = field(default_factory=dict)
    state: dict[str, np.ndarray] = field(default_factory=dict)
    chunks: list[int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # tasks travel as one int64 array: cheaper to pickle than n objects, seeds stay exact
        packed = np.array(
            [(t.client_id, t.epochs, t.seed, t.num_samples, t.poisoned) for t in self.tasks],
            dtype=np.int64,
        ).reshape(-1, 5)
        return {**self.__dict__, "tasks": packed}

    def __setstate__(self, st: dict[str, Any]) -> None:
        st = dict(st)
        st["tasks"] = [TrainTask(c, e, sd, n, bool(p)) for c, e, sd, n, p in st["tasks"].tolist()]
        self.__dict__.update(st)

    def subset(self, keep: list[int]) -> TrainRequest:
        """The request restricted to task positions ``keep``, in that order (fault
        re-placement, model groups' order; one chunk)."""
        ids = {self.tasks[i].client_id for i in keep}
        return TrainRequest(
            [self.tasks[i] for i in keep],
            None if self.summed is None else self.summed[keep],
            None if self.weights is None else self.weights[keep],
            {c: v for c, v in self.starts.items() if c in ids},
            {k: v[keep] for k, v in self.state.items()},
        )
