"""Local training of many clients as one stacked computation.

What a client computes (its local objective, from its algorithm's ``client_loss``) is defined
once, for one client (:class:`~simulator.training.client_step.ClientStep`). How it runs is
separate: :func:`train_clients` either maps that step over a stack of K clients with
``torch.func.vmap`` (one batched computation: the source of FedSentry's speed) or calls it for
one client at a time (the sequential reference). Both paths use the same batch schedule and
padding, so they agree to float rounding.

Clients with fewer samples or fewer epochs (FedProx partial work) are masked, not split off: a
client whose schedule has ended takes no further step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from simulator.training.drivers import run_one_by_one, run_stacked
from simulator.training.flat import FlatLayout
from simulator.training.loop import LocalTraining
from simulator.training.spec import LocalSpec, TrainOutput


def train_clients(
    model: nn.Module,
    layout: FlatLayout,
    global_flat: torch.Tensor,
    x_all: torch.Tensor,
    y_all: torch.Tensor,
    client_idx: Sequence[np.ndarray],
    epochs: Sequence[int],
    seeds: Sequence[int],
    spec: LocalSpec,
    vectorize: bool = True,
    poisoned: Sequence[bool] | None = None,
    starts: dict[int, torch.Tensor] | None = None,
    state: dict[str, torch.Tensor] | None = None,
    shared: dict[str, torch.Tensor] | None = None,
) -> TrainOutput:
    """Train K clients from the same global model with the algorithm's local objective.

    Parameters
    ----------
    model : a module of the right architecture (used only as a functional template).
    layout : its :class:`FlatLayout`.
    global_flat : ``[P]`` global state.
    x_all, y_all : the samples this worker holds; ``client_idx[k]`` indexes client k's rows.
    epochs : local epochs per client (variable local work, FedProx).
    seeds : per-client shuffling seeds (derived from experiment seed, round and client id).
    vectorize : all K clients as one stacked computation (True), or one at a time (False).
    poisoned : which clients are malicious; their batches go through ``spec.data_attack``.
    starts : ``{position k: [P] model}`` for clients that start from their own model instead of
        the global one (Siren's alarming clients, parameters kept on the client); their update
        is still relative to the global model.
    state : per-client tensors from the client-state store, ``{name: [K, ...]}``.
    shared : tensors the server sends every client, ``{name: [...]}``.

    Notes
    -----
    The algorithm's client step is written for one client (:class:`simulator.training.step.Step`).
    The
    stacked path keeps the K clients' parameters in one ``[K, P]`` leaf tensor, maps the whole
    per-client objective (forward, masked loss, algorithm terms) over the clients with
    ``torch.func.vmap`` and differentiates the sum of the per-client losses with ordinary
    autograd; one SGD step is then a single ``[K, P]`` update. The sequential path calls the same
    objective once per client. Normalization buffers are stacked and updated in place; the
    padded rows of a partial last batch are masked out of the loss and, through
    :data:`simulator.training.models.BATCH_MASK`, out of BatchNorm's batch statistics.
    """
    model.train()
    t = LocalTraining(
        model,
        layout,
        global_flat,
        x_all,
        y_all,
        client_idx,
        epochs,
        seeds,
        spec,
        poisoned,
        shared or {},
    )
    state = state or {}
    if vectorize:
        updates, losses, outputs = run_stacked(t, starts or {}, state)
    else:
        updates, losses, outputs = run_one_by_one(t, starts or {}, state)
    return TrainOutput(
        updates.detach(),
        np.asarray(losses, np.float32),
        t.steps.cpu().numpy().astype(np.int64),
        dict(outputs),
    )
