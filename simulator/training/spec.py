"""What local training is asked and what it returns: the clients' optimizer settings and step
(:class:`LocalSpec`), a batch of clients' answer (:class:`TrainOutput`), and the batch schedule
both ways of running the step share (:func:`make_schedule`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class LocalSpec:
    """Client optimizer settings and the algorithm's client step.

    ``step`` is the object whose ``client_loss(Step)`` is the local objective and whose
    ``client_finish(Finish)`` gives the client's new state and extras (an
    :class:`~simulator.algorithms.base.Algorithm`); ``None`` means plain empirical risk
    (:data:`simulator.training.step.PLAIN`). It travels to the actors, so it must be picklable. The
    optimizer is SGD with ``momentum`` (buffer reset every round) and L2 ``weight_decay``.
    """

    lr: float
    batch_size: int
    weight_decay: float = 0.0
    step: Any = None
    #: a data attack (``attacks.base.DataAttack``) applied to the batches of poisoned clients
    data_attack: Any = None
    num_classes: int = 0
    momentum: float = 0.0


@dataclass(frozen=True)
class TrainOutput:
    """What a batch of clients returns."""

    updates: torch.Tensor  # [K, P] new local state minus the global state (whole flat model)
    losses: np.ndarray  # [K] mean training loss over the client's steps
    steps: np.ndarray  # [K] SGD steps taken
    #: [K, ...] tensors from the step's ``client_finish`` (new store rows and extras)
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)


def make_schedule(
    sizes: Sequence[int], epochs: Sequence[int], seeds: Sequence[int], batch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Batch schedule for K clients: local sample indices ``[K, S, B]`` and a validity mask.

    Client k reshuffles its ``sizes[k]`` samples each epoch (seeded by ``seeds[k]``) and takes
    ``ceil(n_k / B)`` steps per epoch, the last one partial; S is the longest schedule.
    """
    steps = [int(e) * -(-int(n) // batch_size) for n, e in zip(sizes, epochs, strict=True)]
    s_max = max(steps) if steps else 0
    k = len(sizes)
    idx = np.zeros((k, max(s_max, 1), batch_size), dtype=np.int64)
    mask = np.zeros((k, max(s_max, 1), batch_size), dtype=np.float32)
    for i, (n, e, seed) in enumerate(zip(sizes, epochs, seeds, strict=True)):
        n = int(n)
        rng = np.random.default_rng(seed)
        nb = -(-n // batch_size)
        pad = nb * batch_size - n
        for ep in range(int(e)):
            order = np.concatenate([rng.permutation(n), np.zeros(pad, dtype=np.int64)])
            valid = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
            idx[i, ep * nb : (ep + 1) * nb] = order.reshape(nb, batch_size)
            mask[i, ep * nb : (ep + 1) * nb] = valid.reshape(nb, batch_size)
    return idx, mask


def client_batches(
    x_all: torch.Tensor,
    y_all: torch.Tensor,
    client_idx: Sequence[np.ndarray],
    epochs: Sequence[int],
    seeds: Sequence[int],
    spec: LocalSpec,
    poisoned: Sequence[bool] | None,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """The K clients' batches ``xs [K, S, B, ...]``, ``ys [K, S, B]`` (one gather per round;
    the data attack applied to the ``poisoned`` clients' batches) and the step mask
    ``[K, S, B]`` of their schedules (:func:`make_schedule`)."""
    sizes = [len(ix) for ix in client_idx]
    local, mask = make_schedule(sizes, epochs, seeds, spec.batch_size)
    rows = np.stack(
        [
            np.asarray(ix, dtype=np.int64)[local[i]] if len(ix) else local[i]
            for i, ix in enumerate(client_idx)
        ]
    )
    rows_t = torch.from_numpy(rows).to(device)
    xs, ys = x_all[rows_t], y_all[rows_t]
    if spec.data_attack is not None and poisoned is not None:
        for i in np.flatnonzero(np.asarray(poisoned, dtype=bool)):
            xs[i], ys[i] = spec.data_attack.poison(
                xs[i], ys[i], num_classes=spec.num_classes, seed=int(seeds[i])
            )
    return xs, ys, mask
